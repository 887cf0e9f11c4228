"""The run registry: runs, their processes and every state change, in `state.db` (SQLite, WAL).

Several servers, the CLI and one supervisor per run read and write it at once, so every
operation opens its own short connection and transaction, writers take the lock up front
(`BEGIN IMMEDIATE`) and wait on a busy timeout instead of failing. State changes are
compare-and-set: a transition names the states it may come from, so two writers racing to end
the same run (a supervisor and a reconciling server) cannot both succeed.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from mcp_rl.locking import exclusive_lock
from mcp_rl.supervisor.states import ACTIVE_STATES, ALLOWED_FROM, ProcState, RunState

if TYPE_CHECKING:
    from mcp_rl.settings import Settings

BUSY_TIMEOUT_MS = 10_000

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY,
    environment TEXT NOT NULL,
    backend TEXT NOT NULL,
    state TEXT NOT NULL,
    cause TEXT,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    running_at REAL,
    ended_at REAL,
    run_dir TEXT NOT NULL,
    config_path TEXT NOT NULL,
    api_port INTEGER,
    inference_port INTEGER,
    supervisor_pid INTEGER,
    supervisor_create_time REAL,
    wandb_project TEXT,
    wandb_run_name TEXT,
    wandb_url TEXT
);
CREATE TABLE IF NOT EXISTS run_processes (
    run_id TEXT NOT NULL REFERENCES runs(run_id),
    name TEXT NOT NULL,
    state TEXT NOT NULL,
    pid INTEGER,
    pgid INTEGER,
    create_time REAL,
    port INTEGER,
    exit_code INTEGER,
    started_at REAL,
    ready_at REAL,
    ended_at REAL,
    log_path TEXT,
    PRIMARY KEY (run_id, name)
);
CREATE TABLE IF NOT EXISTS run_events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id TEXT NOT NULL,
    time REAL NOT NULL,
    subject TEXT NOT NULL,
    state TEXT NOT NULL,
    cause TEXT
);
CREATE INDEX IF NOT EXISTS run_events_by_run ON run_events(run_id, id);
CREATE TABLE IF NOT EXISTS run_status_checks (
    run_id TEXT PRIMARY KEY,
    checked_at REAL NOT NULL,
    state TEXT NOT NULL
);
"""


class RunRecord(BaseModel):
    run_id: str
    environment: str
    backend: str
    state: RunState
    cause: str | None = None
    created_at: float
    updated_at: float
    running_at: float | None = None
    ended_at: float | None = None
    run_dir: str
    config_path: str
    api_port: int | None = None
    inference_port: int | None = None
    supervisor_pid: int | None = None
    supervisor_create_time: float | None = None
    wandb_project: str | None = None
    wandb_run_name: str | None = None
    wandb_url: str | None = None

    @property
    def active(self) -> bool:
        return self.state in ACTIVE_STATES


class ProcessRecord(BaseModel):
    run_id: str
    name: str
    state: ProcState
    pid: int | None = None
    pgid: int | None = None
    create_time: float | None = None
    port: int | None = None
    exit_code: int | None = None
    started_at: float | None = None
    ready_at: float | None = None
    ended_at: float | None = None
    log_path: str | None = None


class EventRecord(BaseModel):
    run_id: str
    time: float
    subject: str  # "run" or a process name
    state: str
    cause: str | None = None


class StatusCheck(BaseModel):
    run_id: str
    checked_at: float
    state: RunState


_RUN_FIELDS = frozenset(RunRecord.model_fields) - {"run_id"}
_PROCESS_FIELDS = frozenset(ProcessRecord.model_fields) - {"run_id", "name"}


class Registry:
    """Access to the run tables of one `state.db`. Cheap to create; holds no connection."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # Created once per file; afterwards opening costs one read (status calls stay fast).
        if self._has_schema():
            return
        # Switching to WAL needs an exclusive lock, and SQLite refuses it at once (no busy wait) while
        # a second opener is creating tables, so first openers take turns on a lock file.
        with exclusive_lock(self.path.with_name(self.path.name + ".init.lock")):
            if self._has_schema():
                return
            with self._connect() as db:
                db.execute("PRAGMA journal_mode=WAL")
                db.executescript(_SCHEMA)

    def _has_schema(self) -> bool:
        with self._connect() as db:
            return db.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'run_status_checks'"
            ).fetchone() is not None

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        db = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None)
        try:
            db.row_factory = sqlite3.Row
            db.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
            db.execute("PRAGMA synchronous=NORMAL")
            yield db
        finally:
            db.close()

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        with self._connect() as db:
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")

    # --- runs ------------------------------------------------------------------------------
    def create_run(self, record: RunRecord, cause: str | None = None) -> None:
        data = record.model_dump(mode="json")
        columns = ", ".join(data)
        marks = ", ".join("?" for _ in data)
        with self._write() as db:
            db.execute(f"INSERT INTO runs ({columns}) VALUES ({marks})", tuple(data.values()))
            _event(db, record.run_id, "run", record.state, cause, record.created_at)

    def get_run(self, run_id: str) -> RunRecord | None:
        with self._connect() as db:
            row = db.execute("SELECT * FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        return RunRecord.model_validate(dict(row)) if row else None

    def list_runs(self, states: frozenset[RunState] | None = None) -> list[RunRecord]:
        """Runs newest first (optionally only those in `states`)."""
        with self._connect() as db:
            rows = db.execute("SELECT * FROM runs ORDER BY created_at DESC, rowid DESC").fetchall()
        runs = [RunRecord.model_validate(dict(row)) for row in rows]
        return [r for r in runs if states is None or r.state in states]

    def update_run(self, run_id: str, **fields: Any) -> None:
        """Set plain fields of a run (ports, supervisor pid, W&B url). Never the state."""
        unknown = set(fields) - _RUN_FIELDS | ({"state", "cause"} & set(fields))
        if unknown:
            raise ValueError(f"not updatable run fields: {sorted(unknown)}")
        fields["updated_at"] = time.time()
        assignments = ", ".join(f"{name} = ?" for name in fields)
        with self._write() as db:
            db.execute(f"UPDATE runs SET {assignments} WHERE run_id = ?", (*fields.values(), run_id))

    def transition(self, run_id: str, new: RunState, cause: str | None = None) -> bool:
        """Move a run to `new` if its current state allows it; False if it did not.

        The check and the write are one statement, so concurrent writers are safe.
        """
        allowed = ALLOWED_FROM[new]
        now = time.time()
        extra = ""
        if new == RunState.RUNNING:
            extra = ", running_at = :now"
        elif new not in ACTIVE_STATES:
            extra = ", ended_at = :now"
        marks = ", ".join(f":s{i}" for i in range(len(allowed)))
        params: dict[str, Any] = {"new": new.value, "cause": cause, "now": now, "run_id": run_id}
        params.update({f"s{i}": state.value for i, state in enumerate(allowed)})
        with self._write() as db:
            changed = db.execute(
                f"UPDATE runs SET state = :new, cause = COALESCE(:cause, cause), updated_at = :now{extra}"
                f" WHERE run_id = :run_id AND state IN ({marks})",
                params,
            ).rowcount
            if changed:
                _event(db, run_id, "run", new, cause, now)
        return bool(changed)

    def active_ports(self) -> set[int]:
        """Ports recorded for runs that may still hold them."""
        ports: set[int] = set()
        for run in self.list_runs(ACTIVE_STATES):
            ports.update(p for p in (run.api_port, run.inference_port) if p)
        return ports

    # --- processes -------------------------------------------------------------------------
    def set_process(self, run_id: str, name: str, cause: str | None = None, **fields: Any) -> None:
        """Insert or update one process row; a change of `state` is also recorded as an event."""
        unknown = set(fields) - _PROCESS_FIELDS
        if unknown:
            raise ValueError(f"unknown process fields: {sorted(unknown)}")
        now = time.time()
        with self._write() as db:
            db.execute(
                "INSERT OR IGNORE INTO run_processes (run_id, name, state) VALUES (?, ?, ?)",
                (run_id, name, ProcState(fields.get("state", ProcState.PENDING)).value),
            )
            if fields:
                values = [v.value if isinstance(v, ProcState) else v for v in fields.values()]
                assignments = ", ".join(f"{k} = ?" for k in fields)
                db.execute(
                    f"UPDATE run_processes SET {assignments} WHERE run_id = ? AND name = ?",
                    (*values, run_id, name),
                )
            if "state" in fields:
                _event(db, run_id, name, ProcState(fields["state"]), cause, now)

    def ended_runs_with_live_processes(self) -> list[str]:
        """Ended runs with a process still recorded as starting or running (an interrupted clean-up)."""
        with self._connect() as db:
            rows = db.execute(
                "SELECT DISTINCT p.run_id FROM run_processes p JOIN runs r ON r.run_id = p.run_id"
                " WHERE r.state IN ('completed', 'failed', 'stopped') AND p.state IN ('starting', 'running')"
            ).fetchall()
        return [row[0] for row in rows]

    def processes(self, run_id: str) -> list[ProcessRecord]:
        with self._connect() as db:
            rows = db.execute("SELECT * FROM run_processes WHERE run_id = ?", (run_id,)).fetchall()
        return [ProcessRecord.model_validate(dict(row)) for row in rows]

    # --- events and status checks ----------------------------------------------------------
    def record_event(self, run_id: str, subject: str, state: str, cause: str | None = None) -> None:
        """An event that changes no state (e.g. a held process released)."""
        with self._write() as db:
            _event(db, run_id, subject, state, cause, time.time())

    def events(self, run_id: str) -> list[EventRecord]:
        with self._connect() as db:
            rows = db.execute(
                "SELECT run_id, time, subject, state, cause FROM run_events WHERE run_id = ? ORDER BY id",
                (run_id,),
            ).fetchall()
        return [EventRecord.model_validate(dict(row)) for row in rows]

    def last_check(self, run_id: str) -> StatusCheck | None:
        with self._connect() as db:
            row = db.execute("SELECT * FROM run_status_checks WHERE run_id = ?", (run_id,)).fetchone()
        return StatusCheck.model_validate(dict(row)) if row else None

    def record_check(self, run_id: str, state: RunState, when: float) -> None:
        with self._write() as db:
            db.execute(
                "INSERT INTO run_status_checks (run_id, checked_at, state) VALUES (?, ?, ?)"
                " ON CONFLICT(run_id) DO UPDATE SET checked_at = excluded.checked_at, state = excluded.state",
                (run_id, when, state.value),
            )


def _event(db: sqlite3.Connection, run_id: str, subject: str, state: str, cause: str | None, when: float) -> None:
    db.execute(
        "INSERT INTO run_events (run_id, time, subject, state, cause) VALUES (?, ?, ?, ?, ?)",
        (run_id, when, subject, str(state), cause),
    )


def registry_for(settings: Settings) -> Registry:
    """The registry of a state directory (created on first use)."""
    settings.ensure_home()
    return Registry(settings.state_db)
