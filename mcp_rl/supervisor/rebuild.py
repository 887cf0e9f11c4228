"""Rebuilding the run registry from the run directories: a missing, empty or damaged `state.db`
must not hide the runs that exist. Rows still readable in a damaged copy are salvaged first (they
know more: pids, causes); every other run directory gets the row its files tell (run.yaml,
trainer_status.json, a cluster submission, a live supervisor of it).
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

import psutil
from pydantic import ValidationError

from mcp_rl.errors import clip_message
from mcp_rl.runconfig import RunConfig
from mcp_rl.rundir import RUN_FILE, TRAINER_STATUS_FILE, TrainerPhase, TrainerStatus, read_trainer_status
from mcp_rl.supervisor.launchers.base import SUBMISSION_FILE, Submission
from mcp_rl.supervisor.run_records import ProcessRecord, RunRecord, insert_event
from mcp_rl.supervisor.states import TERMINAL_STATES, RunState


def salvage(db: sqlite3.Connection, damaged: Path) -> list[str]:
    """Copy the rows that still read back from a damaged database; returns the run ids kept."""
    saved: list[str] = []
    try:
        old = sqlite3.connect(f"file:{damaged}?mode=ro", uri=True, timeout=1)
    except sqlite3.Error:
        return saved
    try:
        old.row_factory = sqlite3.Row
        for table, model in (("runs", RunRecord), ("run_processes", ProcessRecord)):
            try:
                rows = old.execute(f"SELECT * FROM {table}").fetchall()
            except sqlite3.Error:
                continue  # this table is unreadable; the run directories fill in
            for row in rows:
                try:
                    data = model.model_validate(dict(row)).model_dump(mode="json")
                except ValidationError:
                    continue
                db.execute(
                    f"INSERT OR IGNORE INTO {table} ({', '.join(data)}) VALUES ({', '.join('?' for _ in data)})",
                    tuple(data.values()),
                )
                if table == "runs":
                    saved.append(data["run_id"])
    finally:
        old.close()
    return saved


REBUILT_CAUSE = "rebuilt from the run directory after state.db was lost or damaged"
# trainer_status.json phases that say how a run ended.
_ENDED_BY_PHASE = {
    TrainerPhase.DONE: RunState.COMPLETED,
    TrainerPhase.FAILED: RunState.FAILED,
    TrainerPhase.STOPPED: RunState.STOPPED,
}


def rebuild(db: sqlite3.Connection, runs_dir: Path) -> list[str]:
    """Insert a row for every run directory not in the table; returns their run ids."""
    if not runs_dir.is_dir():
        return []
    known = {row[0] for row in db.execute("SELECT run_id FROM runs")}
    rebuilt = []
    supervisors: dict[str, tuple[int, float]] | None = None  # looked up once, when first needed
    for run_dir in sorted(p for p in runs_dir.iterdir() if p.is_dir() and p.name not in known):
        if not (run_dir / RUN_FILE).exists():
            continue
        if supervisors is None:
            supervisors = _live_supervisors()
        record = run_record_from_dir(run_dir, supervisors)
        data = record.model_dump(mode="json")
        db.execute(
            f"INSERT INTO runs ({', '.join(data)}) VALUES ({', '.join('?' for _ in data)})", tuple(data.values())
        )
        insert_event(db, record.run_id, "run", record.state, record.cause, time.time())
        rebuilt.append(record.run_id)
    return rebuilt


def run_record_from_dir(run_dir: Path, supervisors: dict[str, tuple[int, float]] | None = None) -> RunRecord:
    """A run's registry row as far as its directory tells: run.yaml (environment, backend, ports,
    W&B), trainer_status.json (how it ended) and a live supervisor of it (if it is still going;
    `supervisors` from `_live_supervisors`, looked up here when not given)."""
    run_dir = run_dir.resolve()
    config_path = run_dir / RUN_FILE
    created = _first_written(run_dir)
    fields: dict[str, Any] = {"environment": "unknown", "backend": "unknown"}
    problems = []
    try:
        config = RunConfig.load(config_path)
        wandb = config.trainer.wandb
        fields.update(
            environment=config.environment.name,
            backend=config.trainer.backend,
            api_port=config.ports.api,
            inference_port=config.ports.inference,
            wandb_project=wandb.project if wandb.enabled else None,
            wandb_run_name=str(config.env.get("wandb_name")) if config.env.get("wandb_name") else None,
        )
    except Exception as exc:  # any damage of run.yaml: the run is still listed, with the reason
        problems.append(f"run.yaml is unreadable: {clip_message(str(exc), 200)}")
    status = read_trainer_status(run_dir / TRAINER_STATUS_FILE).status or TrainerStatus()
    phase, step, heartbeat = status.phase, status.step, status.heartbeat
    supervisor = (_live_supervisors() if supervisors is None else supervisors).get(str(run_dir))
    job = _submitted_job(run_dir)
    if job is not None:
        fields.update(launcher=job.launcher, job_id=job.job_id, job_address=job.address)
    ended_at: float | None = None
    if phase in _ENDED_BY_PHASE:
        state = _ENDED_BY_PHASE[phase]
        cause = f"{REBUILT_CAUSE}; the trainer recorded phase '{phase}'"
        if state == RunState.FAILED and status.error:
            cause += f": {status.error}"
        ended_at = float(heartbeat) if heartbeat else created
    elif supervisor is not None:
        state = RunState.RUNNING if phase else RunState.STARTING
        cause = f"{REBUILT_CAUSE}; its supervisor (pid {supervisor[0]}) is still running"
    elif job is not None and job.job_id is not None:
        # Its supervisor runs in a cluster job: the scheduler says (at the next status) whether it still goes.
        state = RunState.RUNNING if phase else RunState.STARTING
        cause = f"{REBUILT_CAUSE}; its {job.launcher} job {job.job_id} is asked how it goes"
    else:
        state = RunState.FAILED
        last = f" (last trainer phase '{phase}', step {step})" if phase else ""
        cause = f"{REBUILT_CAUSE}; how it ended was not recorded and no supervisor of it is running{last}"
        ended_at = float(heartbeat) if heartbeat else created
    if problems:
        cause += "; " + "; ".join(problems)
    return RunRecord(
        run_id=run_dir.name,
        state=state,
        cause=cause,
        created_at=created,
        updated_at=time.time(),
        running_at=None if state == RunState.STARTING else created,
        ended_at=ended_at if state in TERMINAL_STATES else None,
        run_dir=str(run_dir),
        config_path=str(config_path),
        supervisor_pid=supervisor[0] if supervisor else None,
        supervisor_create_time=supervisor[1] if supervisor else None,
        **fields,
    )


def _submitted_job(run_dir: Path) -> Submission | None:
    """The cluster job a run was submitted as (its launcher's submission.json), if any."""
    try:
        return Submission.model_validate_json((run_dir / SUBMISSION_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _first_written(run_dir: Path) -> float:
    """When the run started, as near as its files tell (the oldest modification time)."""
    times = []
    for path in (run_dir, *run_dir.iterdir(), *(run_dir / "logs").glob("*")):
        try:
            times.append(path.stat().st_mtime)
        except OSError:
            continue
    return min(times, default=time.time())


def _live_supervisors() -> dict[str, tuple[int, float]]:
    """(pid, start time) of every running run supervisor, by the run dir its command line names
    (`python -m mcp_rl.supervisor --run-dir <dir>`)."""
    found: dict[str, tuple[int, float]] = {}
    for proc in psutil.process_iter(["cmdline", "create_time"]):
        cmdline = proc.info.get("cmdline") or []
        if "mcp_rl.supervisor" in cmdline and "--run-dir" in cmdline[:-1]:
            found[cmdline[cmdline.index("--run-dir") + 1]] = (proc.pid, proc.info["create_time"])
    return found
