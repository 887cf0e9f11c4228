"""The trainer's records in the run directory (formats fixed by the team brief).

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
from typing import Any, Literal

from pydantic import BaseModel

from mcp_rl.runconfig import RunPaths, write_text_atomic

Phase = Literal[
    "starting", "loading_model", "waiting_for_model", "waiting_for_batch", "training", "saving", "done", "stopped", "failed"
]
CheckpointKind = Literal["sampler", "state"]


class TrainerStatus(BaseModel):
    phase: Phase = "starting"
    step: int = 0
    num_steps: int = 0
    heartbeat: float = 0.0
    pid: int = 0
    final_weights: str | None = None
    resume_state: str | None = None
    error: str | None = None
    wandb_url: str | None = None
    # Seconds spent so far in a remote service's queue for our model (phase waiting_for_model).
    model_wait_s: float | None = None


class CheckpointRecord(BaseModel):
    step: int
    kind: CheckpointKind
    path: str
    time: float
    final: bool = False


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
        self.status = TrainerStatus(num_steps=num_steps, pid=os.getpid())

    def update(self, **changes: Any) -> None:
        with self._lock:
            self.status = self.status.model_copy(update=changes)
            self._write_status_locked()

    def heartbeat(self) -> None:
        with self._lock:
            self._write_status_locked()

    def _write_status_locked(self) -> None:
        self.status = self.status.model_copy(update={"heartbeat": time.time()})
        write_text_atomic(self.paths.trainer_status, self.status.model_dump_json(indent=2) + "\n")

    def metrics(self, step: int, values: dict[str, Any]) -> dict[str, Any]:
        line = {"step": step, "time": time.time(), **values}
        with self._lock:
            _append_line(self.paths.metrics, line)
        return line

    def checkpoint(self, step: int, kind: CheckpointKind, path: str, *, final: bool = False) -> CheckpointRecord:
        record = CheckpointRecord(step=step, kind=kind, path=path, time=time.time(), final=final)
        with self._lock:
            _append_line(self.paths.checkpoints_index, record.model_dump())
        return record


def read_checkpoints(path: Path) -> list[CheckpointRecord]:
    """Every well-formed line of checkpoints.jsonl (a torn last line is skipped)."""
    records: list[CheckpointRecord] = []
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return records
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        try:
            records.append(CheckpointRecord.model_validate_json(line))
        except ValueError:
            continue
    return records


def last_state(path: Path) -> CheckpointRecord | None:
    """The newest resumable checkpoint recorded, by step."""
    states = [r for r in read_checkpoints(path) if r.kind == "state"]
    return max(states, key=lambda r: (r.step, r.time)) if states else None


def last_metrics_step(path: Path) -> int:
    """The highest step in metrics.jsonl (0 when none)."""
    best = 0
    try:
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                try:
                    best = max(best, int(json.loads(line)["step"]))
                except (ValueError, KeyError, TypeError):
                    continue
    except FileNotFoundError:
        pass
    return best
