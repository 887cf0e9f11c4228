"""Run rows for tests: the registry record of a run folder, as rl_start_training would make it."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from mcp_rl.supervisor.registry import RunRecord
from mcp_rl.supervisor.states import RunState


def run_record(
    run_id: str,
    run_dir: Path,
    *,
    environment: str = "arithmetic",
    state: RunState = RunState.STARTING,
    created_at: float | None = None,
    **extra: Any,
) -> RunRecord:
    """A local-backend run of `environment` in `run_dir` (its run.yaml beside), created now."""
    now = time.time()
    return RunRecord(
        run_id=run_id,
        environment=environment,
        backend="local",
        state=state,
        created_at=now if created_at is None else created_at,
        updated_at=now,
        run_dir=str(run_dir),
        config_path=str(Path(run_dir) / "run.yaml"),
        **extra,
    )
