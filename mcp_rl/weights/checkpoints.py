"""A run's checkpoints as things an agent can see and keep.

The run's `checkpoints.jsonl` is the list, read and written through its owner, mcp_rl.rundir: a
later line for the same path supersedes earlier ones (keeping, a new TTL and deleting append a
line, the trainer's lines are never rewritten). Every keep, TTL and delete reads, checks and
changes under the run's checkpoint lock, as retention does; a checkpoint an export or an
evaluation has leased is not deleted.
Local checkpoints live in `runs/<id>/checkpoints/<step>/` (the adapter folder and
trainer_state.pt); Tinker checkpoints are `tinker://` paths whose expiry Tinker holds, changed
through the real `tinker.RestClient` (what `tinker checkpoint set-ttl / delete` do).
"""

from __future__ import annotations

import math
import shutil
import time
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from mcp_rl.errors import NotFound, UnknownId, UserError, clip_id
from mcp_rl.runconfig import RunConfig
from mcp_rl.rundir import (
    CHECKPOINTS_DIR,
    CHECKPOINTS_FILE,
    RUN_FILE,
    CheckpointRecord,
    active_leases,
    append_checkpoint,
    checkpoint_lock,
    is_run_id,
    leased_by,
    read_index,
)
from mcp_rl.settings import Settings
from mcp_rl.trainer.retention import disk_bytes, step_folder

# Tinker takes TTLs from 1 hour to 10 years.
MIN_TTL_S = 3600
MAX_TTL_S = 10 * 365 * 24 * 3600
REMOTE_TIMEOUT_S = 20.0

Kind = Literal["state", "sampler", "adapter"]


class CheckpointInfo(BaseModel):
    step: int
    kind: Kind = Field(
        description="state: resumable (weights + optimizer); adapter: a local PEFT adapter folder; "
        "sampler: Tinker sampler weights (sample from them; not downloadable)."
    )
    where: str = Field(description="A local folder or a tinker:// path.")
    size_bytes: int | None = None
    expires_at: float | None = Field(None, description="Unix time it expires; None: never.")
    expires_in_hours: float | None = None
    final: bool = False
    kept: bool = Field(False, description="Kept like a final one: never expires, never deleted by retention.")
    exists: bool | None = Field(None, description="Local: whether the folder is on disk (retention may delete).")


class CheckpointList(BaseModel):
    run_id: str
    backend: str
    base_model: str
    checkpoints: list[CheckpointInfo]
    disk_mb: float = Field(description="Disk used by the run's local checkpoints.")
    keep_last_checkpoints: int | None = None
    message: str


class Run(BaseModel):
    run_id: str
    run_dir: Path
    config: RunConfig


def load_run(settings: Settings, run_id: str) -> Run:
    if not is_run_id(run_id) or not (settings.runs_dir / run_id / RUN_FILE).is_file():
        raise UnknownId(
            f"no run {clip_id(run_id)!r} in {settings.runs_dir}: rl_list_runs shows the runs there", "run_id", run_id
        )
    run_dir = settings.runs_dir / run_id
    return Run(run_id=run_id, run_dir=run_dir, config=RunConfig.load(run_dir / RUN_FILE))


def current_records(run: Run) -> list[CheckpointRecord]:
    """The newest line of each checkpoint path, deleted ones left out (rundir.read_index), by
    step then kind."""
    return sorted(read_index(run.run_dir / CHECKPOINTS_FILE).records, key=lambda r: (r.step, r.kind))


def _info(run: Run, record: CheckpointRecord, remote: dict[str, Any]) -> CheckpointInfo:
    local = "://" not in record.path
    kind: Kind = record.kind if (record.kind == "state" or not local) else "adapter"
    size: int | None = None
    exists: bool | None = None
    expires = record.expires_at
    if local:
        path = Path(record.path)
        exists = path.exists()
        try:
            if exists:
                size = (path / "trainer_state.pt").stat().st_size if kind == "state" else disk_bytes(path)
        except OSError:  # deleted while we looked (retention, a delete in another call)
            exists, size = path.exists(), None
    elif record.path in remote:
        item = remote[record.path]
        size = item.size_bytes
        expires = item.expires_at.timestamp() if item.expires_at is not None else None
    elif record.final or record.kept:
        expires = None
    hours = None if expires is None else round((expires - time.time()) / 3600, 1)
    return CheckpointInfo(
        step=record.step,
        kind=kind,
        where=record.path,
        size_bytes=size,
        expires_at=expires,
        expires_in_hours=hours,
        final=record.final,
        kept=record.kept,
        exists=exists,
    )


def rest_client(settings: Settings) -> Any:
    """The real Tinker REST client with the user's key (from Settings, never from arguments)."""
    if settings.tinker_api_key is None:
        raise UserError(
            "this run's checkpoints live on Tinker and TINKER_API_KEY is not set (or is a placeholder) in the "
            "server's environment: set it and restart the server"
        )
    # tinker is heavy: imported only for a Tinker run's checkpoints
    import tinker

    return tinker.RestClient(base_url=settings.tinker_base_url, api_key=settings.tinker_api_key.get_secret_value())


def _training_run_ids(records: list[CheckpointRecord]) -> list[str]:
    return sorted({r.path[len("tinker://") :].split("/", 1)[0] for r in records if r.path.startswith("tinker://")})


def _remote(settings: Settings, records: list[CheckpointRecord]) -> tuple[dict[str, Any], str | None]:
    """Tinker's own view (size, expiry) of the run's checkpoints; a failure is a note."""
    ids = _training_run_ids(records)
    if not ids:
        return {}, None
    try:
        rest = rest_client(settings)
        found = {}
        for training_run_id in ids:
            for item in rest.list_checkpoints(training_run_id).result(timeout=REMOTE_TIMEOUT_S).checkpoints:
                found[item.tinker_path] = item
        return found, None
    except Exception as exc:  # the list still answers from the run's own records
        return {}, f"Tinker's checkpoint list was not available ({type(exc).__name__}); expiry shown as recorded."


def list_checkpoints(settings: Settings, run_id: str) -> CheckpointList:
    run = load_run(settings, run_id)
    records = current_records(run)
    remote, note = _remote(settings, records)
    infos = [_info(run, r, remote) for r in records]
    infos = [i for i in infos if i.exists is not False]
    t = run.config.trainer
    keep_last = getattr(t, "keep_last_checkpoints", None)
    message = f"{len(infos)} checkpoint(s) of run {run_id} ({t.backend}, {t.base_model})."
    expiring = [i for i in infos if i.expires_at is not None]
    if expiring:
        soonest = min(expiring, key=lambda i: i.expires_at or 0)
        message += (
            f" {len(expiring)} expire; the soonest (step {soonest.step}) in {soonest.expires_in_hours} h: "
            "rl_keep_checkpoint(run_id, step) keeps one forever."
        )
    if note:
        message += " " + note
    return CheckpointList(
        run_id=run_id,
        backend=t.backend,
        base_model=t.base_model,
        checkpoints=infos,
        disk_mb=round(disk_bytes(run.run_dir / CHECKPOINTS_DIR) / 1e6, 1),
        keep_last_checkpoints=keep_last,
        message=message,
    )


def _on_disk(record: CheckpointRecord) -> bool:
    return record.remote or Path(record.path).exists()


def _at_step(run: Run, step: int) -> list[CheckpointRecord]:
    """The checkpoint records of `step` that still exist (retention may have pruned a local one)."""
    current = current_records(run)
    found = [r for r in current if r.step == step]
    there = [r for r in found if _on_disk(r)]
    if not there:
        steps = sorted({r.step for r in current if _on_disk(r)})
        pruned = " (its folder was deleted by retention, keep_last_checkpoints)" if found else ""
        raise NotFound(
            f"run {run.run_id} has no checkpoint at step {step}{pruned}; its checkpoints are at steps {steps}"
        )
    return there


def _append(run: Run, record: CheckpointRecord, **changes: Any) -> None:
    append_checkpoint(run.run_dir / CHECKPOINTS_FILE, record.model_copy(update={**changes, "time": time.time()}))


def keep(settings: Settings, run_id: str, step: int) -> CheckpointList:
    """Keep the checkpoint of `step` forever: Tinker removes its TTL; local retention skips it."""
    run = load_run(settings, run_id)
    with checkpoint_lock(run.run_dir):
        records = _at_step(run, step)
        remote = [r.path for r in records if r.remote]
        if remote:
            rest = rest_client(settings)
            for future in [rest.set_checkpoint_ttl_from_tinker_path(p, None) for p in remote]:
                future.result(timeout=REMOTE_TIMEOUT_S)
        for record in records:
            _append(run, record, kept=True, expires_at=None)
    return list_checkpoints(settings, run_id)


def set_ttl(settings: Settings, run_id: str, step: int, ttl_hours: float) -> CheckpointList:
    """Give a Tinker checkpoint a new lifetime from now (1 hour to 10 years)."""
    if not math.isfinite(ttl_hours):
        raise UserError(f"ttl_hours must be a finite number, got {ttl_hours}")
    if not MIN_TTL_S <= ttl_hours * 3600 <= MAX_TTL_S:  # before rounding: 1e308 hours would overflow
        raise UserError(f"ttl_hours must be between 1 and {MAX_TTL_S // 3600} (10 years), got {ttl_hours:g}")
    seconds = round(ttl_hours * 3600)
    if not MIN_TTL_S <= seconds <= MAX_TTL_S:
        raise UserError(f"ttl_hours must be between 1 and {MAX_TTL_S // 3600} (10 years), got {ttl_hours:g}")
    run = load_run(settings, run_id)
    with checkpoint_lock(run.run_dir):
        records = _at_step(run, step)
        remote = [r for r in records if r.remote]
        if not remote:
            raise UserError(
                "local checkpoints never expire (retention keeps the final, the kept and the last "
                "keep_last_checkpoints): use rl_keep_checkpoint to protect this one from retention"
            )
        rest = rest_client(settings)
        for future in [rest.set_checkpoint_ttl_from_tinker_path(r.path, seconds) for r in remote]:
            future.result(timeout=REMOTE_TIMEOUT_S)
        for record in remote:
            _append(run, record, kept=False, expires_at=time.time() + seconds)
    return list_checkpoints(settings, run_id)


def delete(settings: Settings, run_id: str, step: int) -> CheckpointList:
    """Delete an intermediate checkpoint: never the final, a kept one or the newest resumable."""
    run = load_run(settings, run_id)
    with checkpoint_lock(run.run_dir):
        records = _at_step(run, step)
        if any(r.final or r.kept for r in records):
            raise UserError(f"the checkpoint at step {step} is final or kept: it is not deleted")
        newest = max((r.step for r in current_records(run) if r.kind == "state"), default=None)
        if step == newest:
            raise UserError(f"step {step} is the newest resumable checkpoint (a resume loads it): it is not deleted")
        leases = active_leases(run.run_dir)
        holder = next((h for r in records if (h := leased_by(r.path, leases)) is not None), None)
        if holder is not None:
            raise UserError(
                f"the checkpoint at step {step} is in use by {holder} (an export or an evaluation): it is not "
                "deleted; delete it once that has ended"
            )
        remote = [r.path for r in records if r.remote]
        if remote:
            rest = rest_client(settings)
            for future in [rest.delete_checkpoint_from_tinker_path(p) for p in remote]:
                future.result(timeout=REMOTE_TIMEOUT_S)
        for record in records:
            folder = step_folder(record, run.run_dir / CHECKPOINTS_DIR)
            if folder is not None and folder.is_dir() and not folder.is_symlink():
                shutil.rmtree(folder)
            _append(run, record, deleted=True)
    return list_checkpoints(settings, run_id)


def resolve_init(settings: Settings, run_id: str, step: int | None, base_model: str, lora_rank: int) -> str:
    """The state checkpoint of an earlier run a new run starts from (TrainerSettings.init_from):
    `step`'s, or the newest; same base model and LoRA rank, still on disk (local)."""
    run = load_run(settings, run_id)
    t = run.config.trainer
    if t.base_model != base_model or t.lora_rank != lora_rank:
        raise UserError(
            f"run {run_id} trained {t.base_model} with LoRA rank {t.lora_rank}; a run of {base_model} with rank "
            f"{lora_rank} cannot start from it"
        )
    states = [r for r in current_records(run) if r.kind == "state" and (step is None or r.step == step)]
    if "://" not in (states[-1].path if states else "://"):
        states = [r for r in states if (Path(r.path) / "trainer_state.pt").is_file()]
    if not states:
        steps = sorted({r.step for r in current_records(run) if r.kind == "state"})
        raise NotFound(f"run {run_id} has no resumable checkpoint at step {step}; resumable steps: {steps}")
    return max(states, key=lambda r: r.step).path


def weights_for_export(run: Run, step: int | None) -> CheckpointRecord:
    """The weights record to export: `step`'s, or the newest (final first)."""
    records = [r for r in current_records(run) if r.kind == "sampler" or "://" in r.path]
    if step is not None:
        records = [r for r in records if r.step == step]
        if not records:
            steps = sorted({r.step for r in current_records(run)})
            raise NotFound(f"run {run.run_id} has no saved weights at step {step}; checkpoints are at steps {steps}")
    if not records:
        raise NotFound(f"run {run.run_id} has saved no weights yet: export after its first checkpoint")
    if "://" not in records[-1].path:
        local = [r for r in records if r.kind == "sampler" and Path(r.path).is_dir()]
        if not local:
            raise NotFound(f"the weights of run {run.run_id} at that step are no longer on disk (retention)")
        return max(local, key=lambda r: r.step)
    # Tinker: only training ("weights/") checkpoints can be downloaded, not sampler weights.
    training = [r for r in records if r.kind == "state"]
    if not training:
        raise UserError("Tinker sampler weights cannot be downloaded; choose a step with a state checkpoint")
    return max(training, key=lambda r: r.step)
