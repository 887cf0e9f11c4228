"""`mcp-rl runs list|status|logs|stop`: the run service, printed for people.

Same state as the MCP tools (state.db and the run folders under MCP_RL_HOME), so a person sees
exactly what an agent sees. Status here is never rate-limited and does not count as an agent's
check. `--json` prints the service's model as the tools return it.
"""

from __future__ import annotations

import sys
import time
from datetime import datetime
from pathlib import Path
from typing import TextIO

from pydantic import BaseModel

from mcp_rl.settings import Settings
from mcp_rl.supervisor import service
from mcp_rl.supervisor.models import RunList, RunStatus, StopResult
from mcp_rl.supervisor.states import LOG_NAMES, TERMINAL_STATES

FOLLOW_POLL_S = 0.5


def _print_json(model: BaseModel, out: TextIO) -> None:
    out.write(model.model_dump_json(indent=2) + "\n")


def _when(ts: float | None) -> str:
    return datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M") if ts else "-"


def _num(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def format_list(runs: RunList) -> str:
    if not runs.runs:
        return "No runs yet. Start one from an MCP client (rl_start_training) or with `mcp-rl demo`."
    header = ("RUN ID", "ENVIRONMENT", "STATUS", "BACKEND", "STEP", "REWARD", "STARTED", "MINUTES")
    rows = [
        (
            r.run_id,
            r.environment,
            str(r.status),
            r.backend,
            "-" if r.step is None else str(r.step),
            _num(r.latest_reward),
            _when(r.created_at),
            f"{r.running_time_minutes:.1f}",
        )
        for r in runs.runs
    ]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in [header, *rows]]
    failed = [r for r in runs.runs if r.cause]
    lines += [f"  {r.run_id}: {r.cause}" for r in failed]
    lines += runs.notes
    return "\n".join(lines)


def format_status(status: RunStatus) -> str:
    lines = [
        f"run        {status.run_id}  ({status.environment}, {status.backend} backend)",
        f"status     {status.status}" + (f"  (trainer: {status.trainer_phase})" if status.trainer_phase else ""),
        f"running    {status.running_time_minutes:.1f} min since {_when(status.created_at)}",
    ]
    m = status.metrics
    if m is not None and m.step is not None:
        steps = f"{m.step}" + (f"/{m.num_steps}" if m.num_steps else "")
        lines.append(
            f"step       {steps}  reward mean {_num(m.reward_mean)}  loss {_num(m.loss, 4)}"
            + (f"  correct {_num(m.percent_correct, 2)}" if m.percent_correct is not None else "")
        )
    for name, proc in status.processes.items():
        port = f" port {proc.port}" if proc.port else ""
        pid = f" pid {proc.pid}" if proc.pid else ""
        lines.append(f"{name:<10} {proc.status}{pid}{port}")
    if status.error:
        lines.append(f"error      {status.error}")
    if status.wandb_url:
        lines.append(f"wandb      {status.wandb_url}")
    if status.config_path:
        lines.append(f"config     {status.config_path}")
    lines.append(f"logs       mcp-rl runs logs {status.run_id} --process trainer|env|api|supervisor")
    lines.append(status.message)
    return "\n".join(lines)


def cmd_list(settings: Settings, as_json: bool, out: TextIO = sys.stdout) -> int:
    runs = service.list_runs(settings)
    _print_json(runs, out) if as_json else out.write(format_list(runs) + "\n")
    return 0


def cmd_status(settings: Settings, run_id: str, as_json: bool, out: TextIO = sys.stdout) -> int:
    status = service.run_status(settings, run_id)
    _print_json(status, out) if as_json else out.write(format_status(status) + "\n")
    return 0


def cmd_logs(settings: Settings, run_id: str, process: str, tail: int, follow: bool, out: TextIO = sys.stdout) -> int:
    out.write(service.read_log(settings, run_id, process, tail))
    out.flush()
    if not follow:
        return 0
    run = service.run_status(settings, run_id)
    path = Path(run.config_path or "").parent / "logs" / f"{process}.log"
    position = path.stat().st_size if path.exists() else 0
    # Follow until the run has ended and its log stopped growing (or Ctrl-C).
    while True:
        if path.exists() and path.stat().st_size > position:
            with open(path, "rb") as fh:
                fh.seek(position)
                chunk = fh.read()
            position += len(chunk)
            out.write(chunk.decode("utf-8", errors="replace"))
            out.flush()
            continue
        if service.run_status(settings, run_id).status in TERMINAL_STATES:
            return 0
        time.sleep(FOLLOW_POLL_S)  # polling a file another process appends to


def cmd_stop(settings: Settings, run_id: str, as_json: bool, out: TextIO = sys.stdout) -> int:
    result: StopResult = service.stop_run(settings, run_id)
    _print_json(result, out) if as_json else out.write(result.message + "\n")
    return 0 if not result.processes_left and not result.ports_in_use else 1


PROCESS_CHOICES = LOG_NAMES
