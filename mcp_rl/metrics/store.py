"""Reading a run's own record: `metrics.jsonl`, `env_metrics.jsonl`, `checkpoints.jsonl`,
`trainer_status.json`, and summarising it (final and best values with their step, a bounded
history).

The trainer appends to these files while we read them, so a reader must never fail on what a
writer is halfway through: an unterminated last line is skipped (it will be complete on the next
read), a line that does not parse is counted and skipped, and a status file that does not parse
yet reads as absent. A file that cannot be read at all (a directory, unreadable) reads as empty;
`damage_report` says in words what is wrong with each file, for the answers that show a run.
Nothing here imports anything heavy.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from mcp_rl import rundir
from mcp_rl.rundir import (
    BOOKKEEPING_KEYS,
    CHECKPOINTS_FILE,
    ENV_METRICS_FILE,
    LOSS_KEY,
    METRICS_FILE,
    PERCENT_CORRECT_KEY,
    REWARD_KEY,
    STEP_KEY,
    TIME_KEY,
    TRAINER_STATUS_FILE,
    CheckpointRecord,
    TrainerStatus,
    read_jsonl,
    unreadable,
)

# At most this many history points, whatever the run length.
MAX_HISTORY_POINTS = 50

Goal = Literal["max", "min"]


def _number(value: Any) -> float | None:
    """A finite float, or None (bools, strings, NaN and inf are not metric values)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def _step(row: dict[str, Any]) -> int | None:
    step = row.get(STEP_KEY)
    if isinstance(step, bool) or not isinstance(step, (int, float)) or not math.isfinite(step):
        return None
    return int(step)


# --- the trainer's status and checkpoints --------------------------------------------------
def read_trainer_status(run_dir: Path) -> TrainerStatus | None:
    """The last status the trainer wrote, or None if there is none (yet) or it is unreadable.
    A value of the wrong type is left out (None); the other fields are still read."""
    return rundir.read_trainer_status(run_dir / TRAINER_STATUS_FILE).status


def trainer_status_fields(run_dir: Path) -> dict[str, Any]:
    """The trainer status as a dict of well-typed values only (missing file: empty)."""
    status = read_trainer_status(run_dir)
    return status.recorded() if status is not None else {}


def damage_report(run_dir: Path) -> list[str]:
    """One sentence per record file of the run that cannot be read (a directory, no permission,
    a status file of the wrong shape). Cheap: the JSONL files are opened, not read (status calls
    stay fast on long runs); their bad lines are counted by the readers that parse them."""
    problems = []
    for name in (METRICS_FILE, ENV_METRICS_FILE, CHECKPOINTS_FILE):
        path = run_dir / name
        try:
            with open(path, "rb"):
                pass
        except FileNotFoundError:
            continue
        except OSError as exc:
            problems.append(unreadable(path, exc))
            continue
        if name == CHECKPOINTS_FILE:  # one line per checkpoint: small enough to read here
            bad = rundir.read_checkpoints(path).bad
            if bad:
                problems.append(
                    f"{name}: {bad} unreadable record(s) were skipped; the checkpoints they name are not listed."
                )
    problem = rundir.read_trainer_status(run_dir / TRAINER_STATUS_FILE).problem
    if problem:
        problems.append(problem)
    return problems


def read_checkpoints(run_dir: Path) -> list[CheckpointRecord]:
    """The run's checkpoints as they stand (rundir.read_index: the newest line of each path,
    deleted ones left out), in the order written; malformed lines are skipped."""
    return rundir.read_index(run_dir / CHECKPOINTS_FILE).records


class WeightsInfo(BaseModel):
    """Where the trained weights are."""

    sampler_weights: str | None = Field(
        None, description="Last saved sampler weights: a tinker:// URL or a local folder (LoRA adapter)."
    )
    sampler_step: int | None = None
    sampler_exists: bool | None = Field(
        None, description="Whether a local folder exists (None for tinker:// paths, which live remotely)."
    )
    final: bool = Field(False, description="True when these are the weights saved after the last step.")
    resume_checkpoint: str | None = Field(None, description="Last resumable training state, if one was saved.")
    resume_step: int | None = None
    checkpoints_saved: int = 0
    survives: str | None = Field(
        None, description="Which checkpoint survives and until when (rl_list_checkpoints lists them all)."
    )


def weights_info(checkpoints: Sequence[CheckpointRecord], status: TrainerStatus | None) -> WeightsInfo:
    sampler = _last(c for c in checkpoints if c.kind == "sampler")
    state = _last(c for c in checkpoints if c.kind == "state")
    info = WeightsInfo(checkpoints_saved=len(checkpoints))
    if sampler is not None:
        info.sampler_weights, info.sampler_step, info.final = sampler.path, sampler.step, sampler.final
    elif status is not None and status.final_weights:
        # A trainer that has not written checkpoints.jsonl still names its final weights.
        info.sampler_weights, info.sampler_step, info.final = status.final_weights, status.step, True
    if state is not None:
        info.resume_checkpoint, info.resume_step = state.path, state.step
    elif status is not None and status.resume_state:
        info.resume_checkpoint = status.resume_state
    if info.sampler_weights is not None:
        info.sampler_exists = None if "://" in info.sampler_weights else Path(info.sampler_weights).exists()
    info.survives = survivor_note(checkpoints)
    return info


def survivor_note(checkpoints: Sequence[CheckpointRecord]) -> str | None:
    """The newest checkpoint and how long it lives: final and kept ones never expire; an
    intermediate Tinker one expires at its recorded time."""
    if not checkpoints:
        return None
    last = max(c.step for c in checkpoints)
    lines = [c for c in checkpoints if c.step == last]
    newest: dict[str, CheckpointRecord] = {}
    for c in lines:
        newest[c.path] = c
    forever = any(c.final or c.kept for c in lines) and all(c.expires_at is None for c in newest.values())
    where = ", ".join(f"{c.kind} {c.path}" for c in newest.values())
    if forever or all(c.expires_at is None for c in newest.values()):
        return f"step {last} survives ({where}); it never expires."
    soonest = min(c.expires_at for c in newest.values() if c.expires_at is not None)
    hours = (soonest - time.time()) / 3600
    return f"step {last} ({where}) expires in {hours:.0f} h: rl_keep_checkpoint(run_id, step={last}) keeps it forever."


def _last(checkpoints: Iterable[CheckpointRecord]) -> CheckpointRecord | None:
    # The highest step wins; among equal steps the one written last (a resumed run rewrites).
    best = None
    for checkpoint in checkpoints:
        if best is None or checkpoint.step >= best.step:
            best = checkpoint
    return best


# --- per-step metrics ----------------------------------------------------------------------
class StepTable(BaseModel):
    """Metrics by step: the trainer's rows merged with the environment's (by step)."""

    rows: list[dict[str, Any]] = Field(default_factory=list, description="Sorted by step, one per step.")
    bad_lines: int = 0
    problems: list[str] = Field(
        default_factory=list, description="Metrics files that could not be read at all, and why."
    )
    trainer_last_step: int | None = Field(None, description="Last step the trainer logged (env lines aside).")

    @property
    def last_step(self) -> int | None:
        return self.rows[-1][STEP_KEY] if self.rows else None

    def series(self, key: str) -> list[tuple[int, float]]:
        """(step, value) for every step where `key` has a finite number."""
        out = []
        for row in self.rows:
            value = _number(row.get(key))
            if value is not None:
                out.append((row[STEP_KEY], value))
        return out

    def metric_keys(self) -> list[str]:
        keys: dict[str, None] = {}
        for row in self.rows:
            for key, value in row.items():
                if key not in BOOKKEEPING_KEYS and _number(value) is not None:
                    keys.setdefault(key, None)
        return list(keys)


def read_step_table(run_dir: Path) -> StepTable:
    """`metrics.jsonl` with `env_metrics.jsonl` folded in by step.

    A resumed trainer may log a step again; the later line wins. Environment metrics fill keys
    the trainer did not log for that step (the environment may log a step more than once: its
    later line wins); a step only the environment logged gets its own row.
    """
    by_step: dict[int, dict[str, Any]] = {}
    bad = 0
    trainer = read_jsonl(run_dir / METRICS_FILE)
    bad += trainer.bad_lines
    for row in trainer.rows:
        step = _step(row)
        if step is None:
            bad += 1
            continue
        by_step[step] = {**row, STEP_KEY: step}
    trainer_keys = {step: set(row) for step, row in by_step.items()}
    env = read_jsonl(run_dir / ENV_METRICS_FILE)
    bad += env.bad_lines
    for row in env.rows:
        step = _step(row)
        if step is None:
            continue
        merged = by_step.setdefault(step, {STEP_KEY: step})
        own = trainer_keys.get(step, set())
        for key, value in row.items():
            # A later environment line of the same step wins; the trainer's own keys always do.
            if key not in (STEP_KEY, TIME_KEY) and key not in own:
                merged[key] = value
    return StepTable(
        rows=[by_step[s] for s in sorted(by_step)],
        bad_lines=bad,
        trainer_last_step=max(trainer_keys, default=None),
        problems=[read.error for read in (trainer, env) if read.error],
    )


class MetricSummary(BaseModel):
    """One metric's last value and best value, each with the step it came from."""

    final: float
    final_step: int
    best: float
    best_step: int
    goal: Goal = Field(description="Whether higher (max) or lower (min) is better.")
    source: Literal["local", "wandb"] = Field("local", description="local: the run's own files.")


def goal_of(key: str) -> Goal:
    return "min" if "loss" in key.lower() else "max"


def summarise(table: StepTable, keys: Iterable[str]) -> dict[str, MetricSummary]:
    """Final and best value of each key present in the table (absent keys are left out)."""
    summary = {}
    for key in keys:
        points = table.series(key)
        if not points:
            continue
        goal = goal_of(key)
        final_step, final = points[-1]
        pick = max if goal == "max" else min
        # On ties the earliest step is the best: that is when the value was first reached.
        best_step, best = pick(points, key=lambda p: (p[1], -p[0]) if goal == "max" else (p[1], p[0]))
        summary[key] = MetricSummary(final=final, final_step=final_step, best=best, best_step=best_step, goal=goal)
    return summary


def summary_keys(table: StepTable) -> list[str]:
    """Which metrics are worth summarising: reward and loss first, then accuracy-like env keys."""
    present = table.metric_keys()
    wanted = [k for k in (REWARD_KEY, LOSS_KEY) if k in present]
    wanted += [k for k in present if k not in wanted and ("percent_correct" in k or k.startswith("eval/"))]
    return wanted


class HistoryPoint(BaseModel):
    step: int
    reward_mean: float | None = None
    loss: float | None = None
    percent_correct: float | None = Field(None, description="train/percent_correct when the environment reports it.")


def downsample_steps(points: Sequence[tuple[int, float]], limit: int = MAX_HISTORY_POINTS) -> list[int]:
    """At most `limit` steps of `points` (sorted by step): the first, the last, and in between
    the lowest and highest value of each of equal-width buckets, so spikes and dips survive."""
    if limit < 2:
        raise ValueError("limit must be at least 2")
    if len(points) <= limit:
        return [step for step, _ in points]
    chosen = {points[0][0], points[-1][0]}
    inner = points[1:-1]
    buckets = (limit - 2) // 2
    for b in range(buckets):
        chunk = inner[b * len(inner) // buckets : (b + 1) * len(inner) // buckets]
        if chunk:
            chosen.add(min(chunk, key=lambda p: p[1])[0])
            chosen.add(max(chunk, key=lambda p: p[1])[0])
    return sorted(chosen)


def history(table: StepTable, limit: int = MAX_HISTORY_POINTS) -> list[HistoryPoint]:
    """A short history of reward and loss, bounded by `limit` for any run length.

    Steps are chosen on the reward curve (the one an agent judges a run by); when no reward is
    logged yet, on the loss curve.
    """
    basis = table.series(REWARD_KEY) or table.series(LOSS_KEY)
    steps = set(downsample_steps(basis, limit))
    points = []
    for row in table.rows:
        if row[STEP_KEY] in steps:
            points.append(
                HistoryPoint(
                    step=row[STEP_KEY],
                    reward_mean=_number(row.get(REWARD_KEY)),
                    loss=_number(row.get(LOSS_KEY)),
                    percent_correct=_number(row.get(PERCENT_CORRECT_KEY)),
                )
            )
    return points
