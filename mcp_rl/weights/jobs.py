"""Exports as background jobs: a detached worker process does the export and writes its progress
to `<home>/exports/<export_id>/status.json` (atomically); tools start it and collect it within
their time budget, like smoke tests. The job's spec holds no secret: the worker reads the
user's tokens from its own environment (Settings), never from a file or its argv.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import time
from enum import StrEnum
from pathlib import Path

import psutil
from pydantic import BaseModel, Field

from mcp_rl.costs.exports import ExportCost, export_cost
from mcp_rl.errors import UnknownId, UserError
from mcp_rl.settings import Settings
from mcp_rl.weights.checkpoints import load_run, weights_for_export
from mcp_rl.weights.export import ExportResult, ExportSpec, Format, check_dest
from mcp_rl.weights.hub import check_repo_id
from mcp_rl.weights.tinker_download import EXPORT_TTL_S

SPEC_FILE = "spec.json"
STATUS_FILE = "status.json"
LOG_FILE = "export.log"


class ExportState(StrEnum):
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"


class ExportStatus(BaseModel):
    export_id: str
    run_id: str
    state: ExportState
    phase: str = ""
    started_at: float
    ended_at: float | None = None
    pid: int | None = None
    pid_started_at: float | None = None
    result: ExportResult | None = None
    notes: list[str] = Field(default_factory=list)
    error: str | None = None
    message: str = ""
    cost: ExportCost | None = Field(
        default=None, description="What the export costs (estimated; a local run's: $0). mcp_rl.costs.exports."
    )


def exports_dir(settings: Settings) -> Path:
    return settings.home / "exports"


def write_status(job_dir: Path, status: ExportStatus) -> None:
    tmp = job_dir / f".{STATUS_FILE}.tmp-{os.getpid()}"
    tmp.write_text(status.model_dump_json(indent=1), encoding="utf-8")
    os.replace(tmp, job_dir / STATUS_FILE)


def read_status(settings: Settings, export_id: str) -> ExportStatus:
    if not export_id.replace("-", "").isalnum() or len(export_id) > 64:
        raise UnknownId(f"no export {export_id[:64]!r}: rl_export_weights starts one", "export_id", export_id)
    job_dir = exports_dir(settings) / export_id
    try:
        status = ExportStatus.model_validate_json((job_dir / STATUS_FILE).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UnknownId(f"no export {export_id!r}: rl_export_weights starts one", "export_id", export_id) from None
    if status.state == ExportState.RUNNING and not _alive(status):
        status.state = ExportState.FAILED
        status.error = f"the export worker (pid {status.pid}) ended without a result; see {job_dir / LOG_FILE}"
        status.message = status.error
    return status


def _alive(status: ExportStatus) -> bool:
    """The worker is alive only if its pid still runs the process that started then."""
    if status.pid is None:
        return True  # not started yet
    try:
        proc = psutil.Process(status.pid)
        return status.pid_started_at is None or abs(proc.create_time() - status.pid_started_at) < 1.0
    except psutil.Error:
        return False


def default_dest(run_dir: Path, step: int, fmt: Format) -> Path:
    return run_dir / "exports" / f"step_{step:06d}-{fmt}"


def start(
    settings: Settings,
    run_id: str,
    *,
    step: int | None,
    format: str,
    dest: str | None,
    push_to_hub: str | None,
    overwrite: bool,
) -> ExportStatus:
    """Check everything that can be checked now (so bad input changes nothing), then start the
    worker. Returns its first status."""
    if format not in ("adapter", "merged"):
        raise UserError(f"format must be 'adapter' or 'merged', got {format[:40]!r}")
    if step is not None and step < 0:
        raise UserError(f"step must be 0 or more, got {step}")
    if push_to_hub is not None:
        check_repo_id(push_to_hub)
    run = load_run(settings, run_id)
    record = weights_for_export(run, step)
    target = Path(dest).expanduser().resolve() if dest else default_dest(run.run_dir, record.step, format)  # type: ignore[arg-type]
    check_dest(target, overwrite)
    t = run.config.trainer
    spec = ExportSpec(
        run_id=run_id,
        run_dir=run.run_dir,
        step=record.step,
        weights=record.path,
        format=format,
        dest=target,
        overwrite=overwrite,
        base_model=t.base_model,
        environment=run.config.environment.name,
        num_steps=t.num_steps,
        trainer_config=t.model_dump(mode="json", exclude={"wandb"}),
        push_to_hub=push_to_hub,
    )
    export_id = f"exp-{int(time.time())}-{secrets.token_hex(3)}"
    job_dir = exports_dir(settings) / export_id
    job_dir.mkdir(parents=True)
    (job_dir / SPEC_FILE).write_text(spec.model_dump_json(indent=1), encoding="utf-8")
    status = ExportStatus(export_id=export_id, run_id=run_id, state=ExportState.RUNNING, started_at=time.time())
    status.cost = export_cost(record.path.startswith("tinker://"), EXPORT_TTL_S)
    status.phase = "starting"
    write_status(job_dir, status)
    with open(job_dir / LOG_FILE, "ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "mcp_rl.weights.worker", str(job_dir)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            # The worker's Settings must name the same Tinker as ours (a test's loopback one).
            env=_worker_env(settings),
            start_new_session=True,
        )
    status.pid = proc.pid
    try:
        status.pid_started_at = psutil.Process(proc.pid).create_time()
    except psutil.Error:
        pass
    # The worker writes its own status from now on; record the pid only if it has not begun.
    current = ExportStatus.model_validate_json((job_dir / STATUS_FILE).read_text(encoding="utf-8"))
    if current.pid is None and current.state == ExportState.RUNNING:
        current.pid, current.pid_started_at = status.pid, status.pid_started_at
        write_status(job_dir, current)
    return current


def _worker_env(settings: Settings) -> dict[str, str]:
    """The worker's environment: ours, with the keys by name and the same Tinker address."""
    env = settings.child_env()
    if settings.tinker_base_url:
        env["TINKER_BASE_URL"] = settings.tinker_base_url
    return env


def describe(status: ExportStatus, tinker: bool) -> str:
    if status.state == ExportState.DONE and status.result is not None:
        r = status.result
        text = f"Export {status.export_id} done: {r.format} of run {status.run_id} in {r.dest} ({r.size_bytes / 1e6:.1f} MB, {r.seconds:.0f} s)."
        if r.hub_url:
            text += f" Pushed to {r.hub_url} (private unless you change it)."
        if r.format == "adapter":
            text += " Load with PeftModel.from_pretrained(base, folder); the base model is in the model card."
        else:
            text += " Load with AutoModelForCausalLM.from_pretrained(folder) alone."
        cost = f" {status.cost.summary}" if status.cost is not None else ""
        return text + "".join(f" {n}" for n in status.notes) + cost
    if status.state == ExportState.FAILED:
        return f"Export {status.export_id} failed: {status.error}. Nothing was left at the destination."
    text = f"Export {status.export_id} is running ({status.phase})."
    if tinker:
        text += " It starts a short Tinker session on the base model to download the checkpoint."
    if status.cost is not None:
        text += f" {status.cost.summary}"
    return text + f" Collect it with rl_get_export_result(export_id={status.export_id!r})."


def spec_of(settings: Settings, export_id: str) -> ExportSpec:
    return ExportSpec.model_validate(json.loads((exports_dir(settings) / export_id / SPEC_FILE).read_text()))
