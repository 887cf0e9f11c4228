"""The run service: what the MCP tools and the CLI call. No MCP types here.

One door, three jobs: starting a run (`start`), its status and the list of runs (`status`),
stopping it (`stop`); and the run's resources (its logs, run.yaml and metrics) here. Everything
is answered from local state (state.db and the run directory) so status calls stay fast; the only
blocking call is `stop_run`, which waits (with a deadline) until nothing of the run is left.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mcp_rl.errors import DamagedState, NotFound
from mcp_rl.rundir import LOGS_DIR, METRICS_FILE
from mcp_rl.settings import Settings
from mcp_rl.supervisor.reconcile import reconcile, repair_dead_runs
from mcp_rl.supervisor.registry import registry_for
from mcp_rl.supervisor.start import start_run
from mcp_rl.supervisor.states import LOG_NAMES
from mcp_rl.supervisor.status import get_run, list_runs, run_status, short_status
from mcp_rl.supervisor.stop import stop_run
from mcp_rl.supervisor.tail import tail_lines

__all__ = [
    "list_runs",
    "read_config",
    "read_log",
    "read_metrics",
    "reconcile",
    "registry_for",
    "repair_dead_runs",
    "run_status",
    "short_status",
    "start_run",
    "stop_run",
]

DEFAULT_LOG_TAIL = 200
MAX_LOG_TAIL = 5000
DEFAULT_METRICS_TAIL = 100


def read_log(settings: Settings, run_id: str, process: str, tail: int = DEFAULT_LOG_TAIL) -> str:
    """The last `tail` lines of one of the run's logs (api, trainer, env, supervisor)."""
    run = get_run(registry_for(settings), run_id)
    if process not in LOG_NAMES:
        raise NotFound(f"Unknown process {process!r}; logs exist for {', '.join(LOG_NAMES)}.")
    tail = max(1, min(int(tail), MAX_LOG_TAIL))
    path = Path(run.run_dir) / LOGS_DIR / f"{process}.log"
    lines = tail_lines(path, tail + 1)
    if not path.exists():
        return f"[{process}.log of run {run.run_id} does not exist yet: the process has not started]\n"
    header = ""
    if len(lines) > tail:
        lines = lines[-tail:]
        header = f"[last {tail} lines of {process}.log; read with ?tail=N (up to {MAX_LOG_TAIL}) for more]\n"
    return header + "\n".join(lines) + ("\n" if lines else "")


def read_config(settings: Settings, run_id: str) -> str:
    run = get_run(registry_for(settings), run_id)
    try:
        text = Path(run.config_path).read_text(encoding="utf-8")
        if not text.strip():
            raise DamagedState(
                f"The run.yaml of run {run.run_id} is empty ({run.config_path}). "
                "The run's metrics and results are still readable (rl_get_results)."
            )
        return text
    except FileNotFoundError as exc:
        raise NotFound(f"Run {run.run_id} has no run.yaml any more ({run.config_path}).") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise DamagedState(
            f"The run.yaml of run {run.run_id} cannot be read ({exc}); it is at {run.config_path}. "
            "The run's metrics and results are still readable (rl_get_results)."
        ) from exc


def read_metrics(settings: Settings, run_id: str, tail: int = DEFAULT_METRICS_TAIL) -> dict[str, Any]:
    """The last `tail` metrics lines of a run, oldest first."""
    run = get_run(registry_for(settings), run_id)
    rows = []
    for line in tail_lines(Path(run.run_dir) / METRICS_FILE, tail):
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return {"run_id": run.run_id, "status": str(run.state), "count": len(rows), "rows": rows}
