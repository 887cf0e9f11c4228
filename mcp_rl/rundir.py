"""A run's folder, `runs/<run_id>/`: the one contract between the trainer that writes it and
everything that reads it (the supervisor, the run service, the results and metrics readers).

    run.yaml             the run file (mcp_rl.runconfig): written once by the server
    metrics.jsonl        one JSON object per trainer step, appended and flushed after the step
    env_metrics.jsonl    what the environment logs, by step (mcp_rl.environments.env_metrics)
    checkpoints.jsonl    the checkpoint index: one `CheckpointRecord` line per saved checkpoint,
                         and one more per keep, TTL or delete (a later line for a path
                         supersedes earlier ones); read with `read_index`, written with
                         `append_checkpoint`, changed under `checkpoint_lock`
    leases/              one file per export or evaluation using a checkpoint (`lease_checkpoint`)
    trainer_status.json  the trainer's `TrainerStatus`, rewritten atomically every few seconds
    env_health.json      the environment's `EnvHealth`: groups scored and failed, its last exception
    rollouts.jsonl       a few `RolloutGroup`s per step: prompt, answers, rewards, advantages
    checkpoints/         the saved weights and states
    logs/                one log per process

The trainer appends to these files while others read them, so every reader here tolerates what
a writer is halfway through and what damage left behind: an unterminated last line is skipped, a
line that does not parse is counted, a status value of the wrong type is left out and reported.
Stdlib and pydantic only: the trainer, the supervisor and the server all import this.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Iterable, Iterator
from enum import StrEnum
from pathlib import Path
from typing import Any, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, ValidationError

from mcp_rl.errors import UserError
from mcp_rl.locking import LockTimeout, exclusive_lock, is_held, lock_fd

# --- names -----------------------------------------------------------------------------------
RUN_FILE = "run.yaml"
METRICS_FILE = "metrics.jsonl"
ENV_METRICS_FILE = "env_metrics.jsonl"
CHECKPOINTS_FILE = "checkpoints.jsonl"
TRAINER_STATUS_FILE = "trainer_status.json"
# Written by the environment process (mcp_rl.environments.failure_report) beside its config:
# the run folder in a run, a model's folder in a smoke test.
ENV_HEALTH_FILE = "env_health.json"
# Written by the trainer after each step: what the model said, bounded (ROLLOUT_* below).
ROLLOUTS_FILE = "rollouts.jsonl"
# An MCP task's judge spend, shared by the run's environment and its held-out evaluations
# (format: mcp_rl.environments.mcp_family.judge.SpendFile).
JUDGE_SPEND_FILE = "judge_spend.json"
ROLLOUT_GROUPS_PER_STEP = 2
ROLLOUT_ANSWERS_PER_GROUP = 16
ROLLOUT_TEXT_CHARS = 1500
CHECKPOINTS_DIR = "checkpoints"
LOGS_DIR = "logs"
# Beside checkpoints.jsonl: the per-run lock every change of the run's checkpoints takes, and the
# leases of the checkpoints an export or an evaluation is reading.
CHECKPOINTS_LOCK = ".checkpoints.lock"
LEASES_DIR = "leases"
# Held-out evaluations (mcp_rl.evaluation): per-item outcomes of the evaluation taken at step S
# in eval/step_{S:06d}.jsonl (format: mcp_rl.proof.outcomes).
EVAL_DIR = "eval"


def eval_outcomes_file(run_dir: Path, step: int) -> Path:
    return run_dir / EVAL_DIR / f"step_{step:06d}.jsonl"


# The run ids the supervisor hands out: also the folder names, so nothing that could walk out
# of runs/ ("..", "/").
RUN_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def is_run_id(text: str | None) -> bool:
    return bool(RUN_ID.match(text or ""))


class RunPaths(BaseModel):
    """Where a run's files are (stored in run.yaml, so every process uses the same paths)."""

    model_config = ConfigDict(extra="forbid")

    run_dir: Path
    logs_dir: Path
    metrics: Path  # one JSON object per trainer step
    checkpoints_dir: Path
    checkpoints_index: Path  # checkpoints.jsonl: one line per saved checkpoint
    trainer_status: Path  # trainer_status.json: phase, step, heartbeat time, final weights

    @classmethod
    def for_run(cls, run_dir: Path) -> RunPaths:
        run_dir = run_dir.resolve()
        return cls(
            run_dir=run_dir,
            logs_dir=run_dir / LOGS_DIR,
            metrics=run_dir / METRICS_FILE,
            checkpoints_dir=run_dir / CHECKPOINTS_DIR,
            checkpoints_index=run_dir / CHECKPOINTS_FILE,
            trainer_status=run_dir / TRAINER_STATUS_FILE,
        )


# --- metric keys (metrics.jsonl and env_metrics.jsonl) ---------------------------------------
STEP_KEY = "step"
TIME_KEY = "time"  # Unix time the line was written
REWARD_KEY = "reward/mean"
LOSS_KEY = "train/loss"
TOKENS_KEY = "tokens"
STEP_SECONDS_KEY = "time/step_seconds"
# The trainer's per-step view of what the model wrote: the mean completion length in tokens, and
# the groups whose completions were all the same tokens (the learning-signal monitors read both).
COMPLETION_TOKENS_KEY = "batch/completion_tokens"
SINGLE_COMPLETION_GROUPS_KEY = "batch/single_completion_groups"
# The share of a step's answers that are its most common completion (one answer whatever the item).
TOP_COMPLETION_SHARE_KEY = "batch/top_completion_share"
# Logged by environments that grade answers (the trainer never writes these).
PERCENT_CORRECT_KEY = "train/percent_correct"
EVAL_PERCENT_CORRECT_KEY = "eval/percent_correct"
# The trainer's held-out evaluation (mcp_rl.evaluation), at the step it was taken (0: the base):
# the mean score, items, seconds taken, and against the run's first evaluation (the base) the
# paired difference with its 95 % interval and p.
EVAL_SCORE_KEY = "eval/score"
EVAL_N_KEY = "eval/n"
EVAL_SECONDS_KEY = "eval/seconds"
EVAL_BASE_SCORE_KEY = "eval/base_score"
EVAL_DIFFERENCE_KEY = "eval/difference"
EVAL_CI_LOW_KEY = "eval/ci_low"
EVAL_CI_HIGH_KEY = "eval/ci_high"
EVAL_P_VALUE_KEY = "eval/p_value"
# What a step cost (mcp_rl.costs): tokens sent to / returned by a paid backend in the step, and
# the estimated USD of the step and of the run so far (null: rates unknown; 0 on a free backend).
COST_PREFILL_TOKENS_KEY = "cost/prefill_tokens"
COST_SAMPLED_TOKENS_KEY = "cost/sampled_tokens"
COST_TRAINED_TOKENS_KEY = "cost/trained_tokens"
COST_STEP_USD_KEY = "cost/step_usd_estimated"
COST_TOTAL_USD_KEY = "cost/total_usd_estimated"
COST_KEYS = (
    COST_PREFILL_TOKENS_KEY,
    COST_SAMPLED_TOKENS_KEY,
    COST_TRAINED_TOKENS_KEY,
    COST_STEP_USD_KEY,
    COST_TOTAL_USD_KEY,
)
# Bookkeeping, not a measure of the model: never summarised as a metric.
BOOKKEEPING_KEYS = frozenset({STEP_KEY, TIME_KEY, TOKENS_KEY, STEP_SECONDS_KEY, *COST_KEYS})


# --- the trainer's phase ---------------------------------------------------------------------
class TrainerPhase(StrEnum):
    STARTING = "starting"
    """The trainer process began; nothing loaded yet."""
    LOADING_MODEL = "loading_model"
    """Loading the model (or resuming its last state), then serving inference and registering
    with the Atropos API."""
    WAITING_FOR_MODEL = "waiting_for_model"
    """A remote service is still queueing our model; `model_wait_s` says for how long."""
    WAITING_FOR_BATCH = "waiting_for_batch"
    """Waiting for the environment's next batch of scored rollouts."""
    TRAINING = "training"
    """Training on a batch (one step)."""
    SAVING = "saving"
    """Saving a checkpoint: periodic, or the last one before ending."""
    DONE = "done"
    """Every step trained and the final weights saved; the trainer exits 0."""
    STOPPED = "stopped"
    """Stopped on request after the step in flight, its last state saved; exits 0."""
    FAILED = "failed"
    """Any error; `error` says what. The trainer exits 1."""


TERMINAL_PHASES = frozenset({TrainerPhase.DONE, TrainerPhase.STOPPED, TrainerPhase.FAILED})
ACTIVE_PHASES = frozenset(TrainerPhase) - TERMINAL_PHASES

# Which phases each phase may be entered from (the path of mcp_rl.trainer.loop). An active phase
# may also be entered again (a queue wait is reported repeatedly); an ended trainer never
# changes phase.
PHASE_ALLOWED_FROM: dict[TrainerPhase, frozenset[TrainerPhase | None]] = {
    TrainerPhase.STARTING: frozenset({None}),
    TrainerPhase.LOADING_MODEL: frozenset({TrainerPhase.STARTING, TrainerPhase.WAITING_FOR_MODEL}),
    TrainerPhase.WAITING_FOR_MODEL: frozenset({TrainerPhase.LOADING_MODEL}),
    TrainerPhase.WAITING_FOR_BATCH: frozenset({TrainerPhase.LOADING_MODEL, TrainerPhase.TRAINING, TrainerPhase.SAVING}),
    TrainerPhase.TRAINING: frozenset({TrainerPhase.WAITING_FOR_BATCH}),
    TrainerPhase.SAVING: frozenset({TrainerPhase.WAITING_FOR_BATCH, TrainerPhase.TRAINING}),
    TrainerPhase.DONE: frozenset({TrainerPhase.SAVING}),
    # A stop request may arrive at any point; the trainer saves what it has and stops.
    TrainerPhase.STOPPED: frozenset(ACTIVE_PHASES),
    TrainerPhase.FAILED: frozenset({None, *ACTIVE_PHASES}),
}


class IllegalPhaseChange(ValueError):
    """The trainer tried a phase change its life cycle does not have (a bug in the trainer)."""


def check_phase_change(old: TrainerPhase | None, new: TrainerPhase | None) -> None:
    """Raise IllegalPhaseChange unless a trainer in phase `old` may enter `new`."""
    if new is None:
        raise IllegalPhaseChange("a trainer's status always has a phase")
    if old == new and new in ACTIVE_PHASES:
        return
    if old not in PHASE_ALLOWED_FROM[new]:
        raise IllegalPhaseChange(f"trainer phase {old} -> {new} is not a step of its life cycle")


# --- records ---------------------------------------------------------------------------------
class TrainerStartup(BaseModel):
    """Where the trainer's start-up went, in seconds (recorded once it serves inference)."""

    model_config = ConfigDict(extra="allow")

    interpreter_s: float  # process created -> the trainer's main(): Python and mcp-rl's own imports
    backend_s: float  # the backend built: torch/transformers imports, the model and adapter (local), a session (Tinker)
    serve_s: float  # the inference server answering /health


class TrainerStatus(BaseModel):
    """`trainer_status.json`. The trainer writes every field; a reader gets None for what the
    file does not hold (or holds with the wrong type) and keeps keys it does not know (a newer
    trainer's)."""

    model_config = ConfigDict(extra="allow")

    phase: TrainerPhase | None = None
    step: int = 0  # the last step trained (and logged to metrics.jsonl)
    num_steps: int | None = None
    heartbeat: float | None = None  # Unix time of the last write; silence means a hung trainer
    pid: int | None = None
    final_weights: str | None = None
    resume_state: str | None = None
    error: str | None = None
    wandb_url: str | None = None
    # Seconds spent so far in a remote service's queue for our model (phase waiting_for_model).
    model_wait_s: float | None = None
    startup: TrainerStartup | None = None
    # Why a trainer stopped by itself (phase stopped without a stop request), e.g. its cost cap.
    stop_cause: str | None = None

    def recorded(self) -> dict[str, Any]:
        """The known fields the file held with a usable value (for answers: nothing made up)."""
        return self.model_dump(include=set(self.model_fields_set) & set(type(self).model_fields), exclude_none=True)


class EnvError(BaseModel):
    """An exception an environment raised while turning an item into a scored group."""

    model_config = ConfigDict(extra="allow")

    type: str  # the exception's class name, e.g. ZeroDivisionError
    message: str
    where: str | None = None  # "my_env.py:42 in score": the innermost frame of the environment's own code
    traceback: str = ""  # the formatted traceback, its last few thousand characters
    time: float | None = None

    def sentence(self) -> str:
        text = f"{self.type}: {self.message}" if self.message else self.type
        return text + (f" (raised at {self.where})" if self.where else "")


class EnvHealth(BaseModel):
    """`env_health.json`: how the environment's groups went. Atropos catches an exception
    raised while collecting a group, logs one line and retries the next item forever, so this
    file is the only place a failing environment says what failed. Rewritten atomically."""

    model_config = ConfigDict(extra="allow")

    groups_scored: int = 0  # collect_trajectories returned a group
    groups_failed: int = 0  # collect_trajectories raised
    # Groups in a row that failed with the same exception at the same place (0 after a scored one).
    streak: int = 0
    first_failure_at: float | None = None
    last_scored_at: float | None = None
    last_error: EnvError | None = None

    def summary(self) -> str | None:
        """One sentence for a status, or None when nothing failed."""
        if not self.groups_failed or self.last_error is None:
            return None
        total = self.groups_scored + self.groups_failed
        return (
            f"{self.groups_failed} of {total} groups failed in the environment "
            f"(last: {self.last_error.sentence()}); {self.groups_scored} scored"
        )


def read_env_health(path: Path) -> EnvHealth | None:
    """The environment's last `EnvHealth` (None: none written, or unreadable)."""
    try:
        return EnvHealth.model_validate_json(path.read_bytes())
    except (OSError, ValueError):
        return None


class RolloutAnswer(BaseModel):
    model_config = ConfigDict(extra="allow")

    text: str  # the model's answer (its last ROLLOUT_TEXT_CHARS characters at most)
    reward: float
    advantage: float  # what the update weighted it by (0: not trained on)


class RolloutGroup(BaseModel):
    """One line of `rollouts.jsonl`: one item's group of answers at one step."""

    model_config = ConfigDict(extra="allow")

    step: int
    group: int  # its index in the step's batch
    prompt: str  # the messages before the answer, as "role: content" lines (bounded)
    answers: list[RolloutAnswer]
    answers_total: int  # answers in the group (those beyond ROLLOUT_ANSWERS_PER_GROUP are left out)
    signal: bool  # the answers got different rewards (a group with none trains nothing)
    # An MCP task's judge (mcp_family/judge.py): its model, prompt, scores, reasons, cost; None without one.
    judge: dict[str, Any] | None = None


def clip_text(text: str, limit: int = ROLLOUT_TEXT_CHARS) -> str:
    return text if len(text) <= limit else "…" + text[-(limit - 1) :]


def read_rollouts(path: Path) -> list[RolloutGroup]:
    """Every well-formed rollout group of a `rollouts.jsonl` (a torn last line is skipped)."""
    groups = []
    for row in read_jsonl(path).rows:
        try:
            groups.append(RolloutGroup.model_validate(row))
        except ValidationError:
            continue
    return groups


CheckpointKind = Literal["sampler", "state"]


class CheckpointRecord(BaseModel):
    """One line of `checkpoints.jsonl`."""

    model_config = ConfigDict(extra="allow")

    step: int
    kind: CheckpointKind  # "sampler": weights to sample from; "state": resumable optimiser state
    path: str  # a local folder or a tinker:// URL
    time: float | None = None
    final: bool = False  # the weights saved after the run's last step
    # Unix time the checkpoint expires on its service (Tinker's TTL); None: it never expires.
    expires_at: float | None = None
    # Kept like a final one: the last of a stopped or failed run, or one a user chose to keep
    # (local retention never deletes it). A later line for the same path supersedes earlier ones.
    kept: bool = False
    # Deleted by a user (rl_delete_checkpoint): no reader of the index names it any more.
    deleted: bool = False

    @property
    def remote(self) -> bool:
        """A service's checkpoint (a tinker:// path), not a local folder."""
        return "://" in self.path


# --- reading ---------------------------------------------------------------------------------
class JsonlRead(BaseModel):
    """Rows of a JSONL file, plus how many lines were skipped and why."""

    rows: list[dict[str, Any]] = []
    bad_lines: int = 0
    partial_tail: bool = False
    # Why the file could not be read at all (a directory, no permission), in words.
    error: str | None = None


def unreadable(path: Path, exc: OSError) -> str:
    """What is wrong with a run file that cannot be opened, and what to do about it."""
    what = "is a directory, not a file" if path.is_dir() else f"cannot be read ({exc.strerror or exc})"
    return f"{path.name} {what}; its data is not shown. Move it aside (e.g. to {path.name}.damaged) to let the run write a new one."


def read_jsonl(path: Path) -> JsonlRead:
    """Every complete JSON object line of `path` (missing file: no rows)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return JsonlRead()
    except OSError as exc:
        return JsonlRead(error=unreadable(path, exc))
    lines = data.decode("utf-8", errors="replace").split("\n")
    # Everything after the last newline is a line still being written, unless it parses.
    tail = lines.pop()
    body = [line for line in lines if line.strip()]
    result = JsonlRead(rows=_parse_all(body))
    if len(result.rows) != len(body):
        result.rows = []
        for raw in body:
            row = _parse(raw)
            if row is None:
                result.bad_lines += 1
            else:
                result.rows.append(row)
    if tail.strip():
        row = _parse(tail)
        if row is None:
            result.partial_tail = True
        else:
            result.rows.append(row)
    return result


def read_jsonl_tail(path: Path, rows: int, max_bytes: int = 256_000) -> list[dict[str, Any]]:
    """The last `rows` complete JSON object lines of `path`, read backwards from its end in small
    chunks and never more than its last `max_bytes` (status calls stay fast on a long run); a
    damaged line is skipped."""
    if rows <= 0:
        return []
    found: list[dict[str, Any]] = []
    try:
        with open(path, "rb") as fh:
            start = end = fh.seek(0, 2)
            data = b""
            while start > 0 and end - start < max_bytes:
                start = max(0, start - min(16_384, max_bytes - (end - start)))
                fh.seek(start)
                data = fh.read(end - start)
                lines = data.decode("utf-8", errors="replace").split("\n")
                if start > 0:
                    lines = lines[1:]  # begins mid-line
                found = [row for row in (_parse(line) for line in lines if line.strip()) if row is not None]
                if len(found) >= rows:
                    break
    except OSError:
        return []
    return found[-rows:]


def read_jsonl_head(path: Path, rows: int, max_bytes: int = 64_000) -> list[dict[str, Any]]:
    """The first `rows` complete JSON object lines of `path`, from at most its first `max_bytes`
    (a damaged line is skipped)."""
    if rows <= 0:
        return []
    try:
        with open(path, "rb") as fh:
            data = fh.read(max_bytes)
    except OSError:
        return []
    lines = data.decode("utf-8", errors="replace").split("\n")
    if len(data) == max_bytes:
        lines = lines[:-1]  # ends mid-line
    found: list[dict[str, Any]] = []
    for line in lines:
        row = _parse(line) if line.strip() else None
        if row is not None:
            found.append(row)
            if len(found) == rows:
                break
    return found


def _parse_all(lines: list[str]) -> list[dict[str, Any]]:
    """All lines as one JSON array (twice as fast as line by line); [] if any line is not an
    object on its own, and the caller then parses line by line to skip just the bad ones."""
    try:
        values: list[dict[str, Any]] = json.loads("[" + ",".join(lines) + "]")
    except ValueError:
        return []
    if len(values) != len(lines) or not all(isinstance(v, dict) for v in values):
        return []
    return values


def _parse(raw: str) -> dict[str, Any] | None:
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


class StatusRead(NamedTuple):
    status: TrainerStatus | None  # None: no status file (yet), or nothing in it is readable
    problem: str | None  # what is wrong with the file, in words (None: nothing)


def read_trainer_status(path: Path) -> StatusRead:
    """The last status the trainer wrote. A value of the wrong type is left out (and named in
    `problem`); the other fields are still read."""
    try:
        data = json.loads(path.read_bytes().decode("utf-8"))
    except FileNotFoundError:
        return StatusRead(None, None)
    except OSError as exc:
        return StatusRead(None, unreadable(path, exc))
    except ValueError:  # half-written by a writer without atomic replace, or damaged
        return StatusRead(None, f"{path.name} is not valid UTF-8 JSON; the trainer's phase and step are not shown.")
    if not isinstance(data, dict):
        return StatusRead(
            None,
            f"{path.name} holds a JSON {type(data).__name__}, not an object; the trainer's phase and step are not shown.",
        )
    try:
        return StatusRead(TrainerStatus.model_validate(data), None)
    except ValidationError as exc:
        bad = sorted({str(err["loc"][0]) for err in exc.errors() if err["loc"]})
        kept = {k: v for k, v in data.items() if k not in bad}
        return StatusRead(
            TrainerStatus.model_validate(kept),
            f"{path.name} has values of the wrong type for {', '.join(bad)}; they are not shown.",
        )


class CheckpointsRead(NamedTuple):
    records: list[CheckpointRecord]  # in the order written
    bad: int  # lines skipped: not JSON, or not a checkpoint record
    error: str | None  # why the file could not be read at all


def read_checkpoints(path: Path) -> CheckpointsRead:
    """Every well-formed record of a `checkpoints.jsonl` (a torn last line is skipped)."""
    read = read_jsonl(path)
    records = []
    bad = read.bad_lines
    for row in read.rows:
        try:
            records.append(CheckpointRecord.model_validate(row))
        except ValidationError:
            bad += 1
    return CheckpointsRead(records, bad, read.error)


# --- the checkpoint index: one reader, one writer, one lock -------------------------------------
def current_checkpoints(records: Iterable[CheckpointRecord]) -> list[CheckpointRecord]:
    """The index as it stands: for each path its newest line (a later line supersedes earlier
    ones; `final` sticks, as no keep or TTL line unmakes it), deleted ones left out, in the order
    their newest lines were written."""
    latest: dict[str, CheckpointRecord] = {}
    for record in records:
        previous = latest.pop(record.path, None)
        if previous is not None and previous.final and not record.final:
            record = record.model_copy(update={"final": True})
        latest[record.path] = record
    return [r for r in latest.values() if not r.deleted]


def read_index(path: Path) -> CheckpointsRead:
    """The run's checkpoints as they stand now (see `current_checkpoints`): what every reader
    of checkpoints.jsonl uses."""
    read = read_checkpoints(path)
    return CheckpointsRead(current_checkpoints(read.records), read.bad, read.error)


def append_checkpoint(path: Path, record: CheckpointRecord) -> None:
    """Add one line to the index (the trainer's saves; keep, TTL and delete): written whole and
    flushed to disk before returning, so a reader sees the line or nothing."""
    path.parent.mkdir(parents=True, exist_ok=True)
    # `deleted` only on the line that deletes: the trainer's lines keep their brief format.
    line = record.model_dump_json(exclude=None if record.deleted else {"deleted"}) + "\n"
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(line)
        fh.flush()
        os.fsync(fh.fileno())


# Longest a keep/delete/TTL/retention/export/evaluation waits for another holder of a run's
# checkpoint lock (each holds it for a read, a check and a few file operations, or one Tinker call).
CHECKPOINT_LOCK_TIMEOUT_S = 30.0


class CheckpointsBusy(UserError):
    """Another change of the run's checkpoints held the lock past the deadline."""


@contextlib.contextmanager
def checkpoint_lock(run_dir: Path, timeout_s: float = CHECKPOINT_LOCK_TIMEOUT_S) -> Iterator[None]:
    """The per-run lock around every read-check-change of a run's checkpoints (keep, delete,
    TTL, retention, and the start of an export or evaluation that leases one)."""
    try:
        with exclusive_lock(run_dir / CHECKPOINTS_LOCK, timeout_s):
            yield
    except LockTimeout:
        raise CheckpointsBusy(
            f"the checkpoints of run {run_dir.name} are being changed by another call; try again in a moment"
        ) from None


def lease_checkpoint(run_dir: Path, checkpoint_path: str, holder: str) -> int:
    """Lease a checkpoint for `holder` (an export or evaluation id): returns an open file
    descriptor holding a lock on the lease file. The lease lasts while any process holds that
    descriptor (hand it to the worker with `pass_fds`, then close yours): the kernel ends it when
    the last holder exits, however it exits. Take it under `checkpoint_lock`."""
    folder = run_dir / LEASES_DIR
    folder.mkdir(parents=True, exist_ok=True)
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", holder)[:100] or "lease"
    fd = os.open(folder / f"{name}.json", os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        lock_fd(fd, shared=True)
        os.write(fd, json.dumps({"path": checkpoint_path, "holder": holder}).encode())
    except BaseException:
        os.close(fd)
        raise
    return fd


class Lease(NamedTuple):
    path: str  # the checkpoint path leased (a record's path, or a folder inside one)
    holder: str


def active_leases(run_dir: Path) -> list[Lease]:
    """The leases still held (a lease whose holders all ended is removed). Call under
    `checkpoint_lock`, so no lease is being taken meanwhile."""
    folder = run_dir / LEASES_DIR
    if not folder.is_dir():
        return []
    held = []
    for file in sorted(folder.glob("*.json")):
        if not is_held(file):  # under checkpoint_lock: no lease is being taken meanwhile
            file.unlink(missing_ok=True)  # nobody holds it: its holders ended
            continue
        try:
            data = json.loads(file.read_text(encoding="utf-8"))
            held.append(Lease(str(data["path"]), str(data.get("holder", file.stem))))
        except (OSError, ValueError, KeyError, TypeError):
            held.append(Lease("", file.stem))  # unreadable: every checkpoint counts as leased
    return held


def leased_by(record_path: str, leases: Iterable[Lease]) -> str | None:
    """The holder of a lease on the checkpoint at `record_path` (or on a folder inside it)."""
    for lease in leases:
        if not lease.path:
            return lease.holder
        if lease.path == record_path or ("://" not in record_path and Path(record_path) in Path(lease.path).parents):
            return lease.holder
    return None
