"""Exports as background jobs: a detached worker process does the export and writes its progress
to `<home>/exports/<export_id>/status.json` (atomically); tools start it and collect it within
their time budget, like smoke tests. The job's spec holds no secret: the worker reads the
user's tokens from its own environment (Settings), never from a file or its argv.

The worker is started and watched through mcp_rl.processes (its marker, its start time, reaped
when it ends). It holds, for its whole life, the lease of the checkpoint it exports (retention
and rl_delete_checkpoint leave it alone) and the claim on its destination (a second export to
it is refused): both are locks on descriptors it inherits, which the kernel drops when it exits.
A worker that died reads `failed`, and its temporary folders beside the destination are removed.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from enum import StrEnum
from pathlib import Path

from pydantic import BaseModel, Field

from mcp_rl import background, processes
from mcp_rl.atomic import recover_aside, write_text_atomic
from mcp_rl.costs.exports import ExportCost, export_cost
from mcp_rl.errors import UnknownId, UserError, clip_id
from mcp_rl.rundir import checkpoint_lock, lease_checkpoint
from mcp_rl.settings import Settings
from mcp_rl.weights import destination
from mcp_rl.weights.checkpoints import load_run, weights_for_export
from mcp_rl.weights.export import ExportResult, ExportSpec, Format
from mcp_rl.weights.hub import check_access
from mcp_rl.weights.tinker_download import EXPORT_TTL_S

SPEC_FILE = "spec.json"
STATUS_FILE = "status.json"
LOG_FILE = "export.log"
DEST_LOCKS = "dest-locks"  # exports/dest-locks/: one lock file per destination (destination.hold)


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
    marker: str | None = None  # the worker's MCP_RL_MARKER (mcp_rl.processes)
    dest: str | None = None  # where the export is written
    hub_repo: str | None = None  # the Hub repo asked for (push_to_hub)
    hub_repo_created: str | None = Field(
        default=None, description="URL of a Hub repo this export created before its push failed."
    )
    result: ExportResult | None = None
    notes: list[str] = Field(default_factory=list)
    error: str | None = None
    message: str = ""
    cost: ExportCost | None = Field(
        default=None, description="What the export costs (estimated; a local run's: $0). mcp_rl.costs.exports."
    )


def exports_dir(settings: Settings) -> Path:
    return settings.exports_dir


def write_status(job_dir: Path, status: ExportStatus) -> None:
    write_text_atomic(job_dir / STATUS_FILE, status.model_dump_json(indent=1))


def read_status(settings: Settings, export_id: str) -> ExportStatus:
    """The export's latest status. A running export whose worker has ended (killed, crashed)
    reads as failed: that is recorded, and its temporary folders beside the destination removed."""
    if not background.JOB_ID_RE.match(export_id):
        raise UnknownId(f"no export {clip_id(export_id)!r}: rl_export_weights starts one", "export_id", export_id)
    job_dir = exports_dir(settings) / export_id
    try:
        status = ExportStatus.model_validate_json((job_dir / STATUS_FILE).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UnknownId(
            f"no export {clip_id(export_id)!r}: rl_export_weights starts one", "export_id", export_id
        ) from None
    if status.state != ExportState.RUNNING or _alive(job_dir):
        return status
    # It may have written its last status just before exiting: read once more.
    status = ExportStatus.model_validate_json((job_dir / STATUS_FILE).read_text(encoding="utf-8"))
    if status.state != ExportState.RUNNING:
        return status
    removed = _remove_leftovers(status)
    status.state = ExportState.FAILED
    status.ended_at = time.time()
    status.error = f"the export worker (pid {status.pid}) ended without a result; see {job_dir / LOG_FILE}"
    if removed:
        status.notes.append(f"Its unfinished output was removed ({', '.join(str(p) for p in removed)}).")
    status.message = status.error
    write_status(job_dir, status)
    return status


def cancel(settings: Settings, export_id: str, timeout_s: float = 30.0) -> ExportStatus:
    """Stop a running export's worker (SIGTERM, then its group killed after `timeout_s`); its
    unfinished output is removed as for any export whose worker ended (`read_status`), and
    mcp_rl.background records the cancel. An ended export is left as it is."""
    status = read_status(settings, export_id)
    job_dir = exports_dir(settings) / status.export_id
    if status.state == ExportState.RUNNING:
        marker = status.marker or processes.marker_for("export", job_dir)
        background.cancel_worker(job_dir, marker, timeout_s)
    return read_status(settings, export_id)


def _alive(job_dir: Path) -> bool:
    """The worker runs: its pid still belongs to the process started then, not ended (a zombie
    has ended); mcp_rl.background, as for smoke tests and evaluations."""
    return background.worker_alive(job_dir)


def _remove_leftovers(status: ExportStatus) -> list[Path]:
    """The dead worker's temporary folders beside the destination (named with its pid)."""
    if status.dest is None or status.pid is None:
        return []
    dest = Path(status.dest)
    # First the user's old folder, if the worker died between replace_dir's two renames: put
    # back, never removed with the unfinished output.
    removed = recover_aside(dest, status.pid)
    for pattern in (f".{dest.name}.tmp-{status.pid}-*", f".{dest.name}.download-{status.pid}-*"):
        for path in dest.parent.glob(pattern):
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
                removed.append(path)
    return removed


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
    target = destination.normalise(dest) if dest is not None else None
    if push_to_hub is not None:
        # No token, a placeholder, one the Hub refuses or that cannot write there: refused before
        # any export work.
        check_access(settings, push_to_hub)
    run = load_run(settings, run_id)
    export_id = background.new_job_id()
    job_dir = exports_dir(settings) / export_id
    with checkpoint_lock(run.run_dir):
        record = weights_for_export(run, step)
        if target is None:
            target = default_dest(run.run_dir, record.step, format)  # type: ignore[arg-type]
        sources = [] if record.remote else [Path(record.path)]
        destination.check_place(target, state_dir=settings.home, runs_dir=settings.runs_dir, sources=sources)
        claim = destination.hold(exports_dir(settings) / DEST_LOCKS, target)
        try:
            push_only = push_to_hub is not None and not overwrite and _same_export(target, run_id, record.step, format)
            if not push_only:
                destination.check_existing(target, overwrite)
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
                push_only=push_only,
            )
            job_dir.mkdir(parents=True)
            (job_dir / SPEC_FILE).write_text(spec.model_dump_json(indent=1), encoding="utf-8")
            status = ExportStatus(
                export_id=export_id,
                run_id=run_id,
                state=ExportState.RUNNING,
                started_at=time.time(),
                dest=str(target),
                hub_repo=push_to_hub,
            )
            status.cost = export_cost(record.remote, EXPORT_TTL_S)
            status.phase = "starting"
            status.marker = processes.marker_for("export", job_dir)
            write_status(job_dir, status)
            lease = lease_checkpoint(run.run_dir, record.path, f"export {export_id}")
            try:
                worker = background.start_worker(
                    # The worker lets go of both once its last status is written (it may take
                    # seconds more to exit): a retry of the same export is not refused meanwhile.
                    [sys.executable, "-m", "mcp_rl.weights.worker", "--dir", str(job_dir)]
                    + ["--held-fd", str(lease), "--held-fd", str(claim)],
                    job_dir,
                    job_dir / LOG_FILE,
                    # The worker's Settings must name the same Tinker as ours (a test's loopback one).
                    _worker_env(settings),
                    marker=status.marker,
                    pass_fds=[lease, claim],
                )
            finally:
                os.close(lease)
        finally:
            os.close(claim)
    status.pid, status.pid_started_at = worker.pid, worker.create_time or None
    # The worker writes its own status from now on; record the pid only if it has not begun.
    current = ExportStatus.model_validate_json((job_dir / STATUS_FILE).read_text(encoding="utf-8"))
    if current.pid is None and current.state == ExportState.RUNNING:
        current.pid, current.pid_started_at = status.pid, status.pid_started_at
        write_status(job_dir, current)
    return current


def _same_export(target: Path, run_id: str, step: int, format: str) -> bool:
    """`target` holds mcp-rl's export of exactly this run, step and format (pushed again as it is)."""
    marker = destination.read_marker(target)
    return marker is not None and (marker.get("run_id"), marker.get("step"), marker.get("format")) == (
        run_id,
        step,
        format,
    )


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
        text = f"Export {status.export_id} failed: {status.error}."
        if status.result is not None:
            text += (
                f" The export itself is complete in {status.result.dest}; only the push to {status.hub_repo} failed."
            )
            if status.hub_repo_created:
                text += f" The repo {status.hub_repo_created} was created (private) by this push and may be empty."
            text += (
                f" Push it again with the same rl_export_weights call (dest={status.result.dest!r}, "
                f"push_to_hub={status.hub_repo!r}): the export there is pushed as it is, no overwrite needed."
            )
        else:
            text += " Nothing was left at the destination."
        return text + "".join(f" {n}" for n in status.notes)
    text = f"Export {status.export_id} is running ({status.phase})."
    if tinker:
        text += " It starts a short Tinker session on the base model to download the checkpoint."
    if status.cost is not None:
        text += f" {status.cost.summary}"
    return text + f" Collect it with rl_get_export_result(export_id={status.export_id!r})."


def spec_of(settings: Settings, export_id: str) -> ExportSpec:
    return ExportSpec.model_validate(json.loads((exports_dir(settings) / export_id / SPEC_FILE).read_text()))
