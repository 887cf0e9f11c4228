"""The trainer's records in the run directory: the writer of the formats in `mcp_rl.rundir`.

- `metrics.jsonl`: one JSON object per step, appended and flushed after the step.
- `checkpoints.jsonl`: one line per saved checkpoint (`kind` "sampler" or "state").
- `trainer_status.json`: rewritten atomically at least every few seconds while alive; the
  supervisor reads `heartbeat` to detect a hung trainer.
"""

from __future__ import annotations

import json
import math
import os
import threading
import time
from pathlib import Path
from typing import Any

from mcp_rl import redact
from mcp_rl.atomic import write_text_atomic
from mcp_rl.rundir import (
    ROLLOUTS_FILE,
    STEP_KEY,
    TIME_KEY,
    CheckpointKind,
    CheckpointRecord,
    RolloutGroup,
    RunPaths,
    TrainerPhase,
    TrainerStatus,
    append_checkpoint,
    check_phase_change,
    read_index,
)


def _clean(value: Any) -> Any:
    """JSON has no NaN/inf: they become null rather than an unparsable line."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _append_line(path: Path, obj: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    line = json.dumps({k: _clean(v) for k, v in obj.items()}, separators=(",", ":"))
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(line + "\n")
        fh.flush()
        os.fsync(fh.fileno())


class RunRecorder:
    """Writes the three files; thread-safe (the heartbeat thread and the loop both write)."""

    def __init__(self, paths: RunPaths, num_steps: int) -> None:
        self.paths = paths
        self._lock = threading.Lock()
        self.status = TrainerStatus(phase=TrainerPhase.STARTING, num_steps=num_steps, pid=os.getpid())

    def update(self, **changes: Any) -> None:
        """Change fields of the status and write it. An unknown field, a value of the wrong type
        or a phase change the trainer's life cycle does not have raises (nothing is written)."""
        unknown = set(changes) - set(TrainerStatus.model_fields)
        if unknown:
            raise ValueError(f"TrainerStatus has no field {', '.join(sorted(unknown))}")
        with self._lock:
            status = TrainerStatus.model_validate({**self.status.model_dump(), **changes})
            if "phase" in changes:
                check_phase_change(self.status.phase, status.phase)
            self.status = status
            self._write_status_locked()

    def heartbeat(self) -> None:
        with self._lock:
            self._write_status_locked()

    def _write_status_locked(self) -> None:
        self.status = self.status.model_copy(update={"heartbeat": time.time()})
        # scrubbed: an error it records may quote what the environment raised (mcp_rl.redact)
        write_text_atomic(self.paths.trainer_status, redact.scrub(self.status.model_dump_json(indent=2)) + "\n")

    def metrics(self, step: int, values: dict[str, Any]) -> dict[str, Any]:
        line = {STEP_KEY: step, TIME_KEY: time.time(), **values}
        with self._lock:
            _append_line(self.paths.metrics, line)
        return line

    def rollouts(self, groups: list[RolloutGroup]) -> None:
        """Append a step's kept rollout groups to rollouts.jsonl."""
        with self._lock:
            for group in groups:
                _append_line(self.paths.run_dir / ROLLOUTS_FILE, group.model_dump(mode="json"))

    def checkpoint(
        self,
        step: int,
        kind: CheckpointKind,
        path: str,
        *,
        final: bool = False,
        kept: bool = False,
        expires_at: float | None = None,
    ) -> CheckpointRecord:
        record = CheckpointRecord(
            step=step, kind=kind, path=path, time=time.time(), final=final, kept=kept, expires_at=expires_at
        )
        with self._lock:
            append_checkpoint(self.paths.checkpoints_index, record)
        return record


def last_state(path: Path) -> CheckpointRecord | None:
    """The newest resumable checkpoint recorded, by step."""
    states = [r for r in read_index(path).records if r.kind == "state"]
    return max(states, key=lambda r: (r.step, r.time or 0.0)) if states else None


def last_metrics_step(path: Path) -> int:
    """The highest step in metrics.jsonl (0 when none)."""
    best = 0
    try:
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                try:
                    best = max(best, int(json.loads(line)[STEP_KEY]))
                except (ValueError, KeyError, TypeError):
                    continue
    except FileNotFoundError:
        pass
    return best
