"""The run registry: runs, their processes and every state change, in `state.db` (SQLite, WAL).

Several servers, the CLI and one supervisor per run read and write it at once, so every
operation opens its own short connection and transaction, writers take the lock up front
(`BEGIN IMMEDIATE`) and wait on a busy timeout instead of failing. State changes are
compare-and-set: a transition names the states it may come from, so two writers racing to end
the same run (a supervisor and a reconciling server) cannot both succeed.

The database is an index, not the only record: each run directory holds its run.yaml, logs,
metrics and trainer status. A damaged state.db (garbage, truncated, a directory) is moved aside
with a timestamp, never deleted, and rebuilt from the run directories; a missing or empty one is
rebuilt the same way; a row that does not read as a run is reported and skipped. What was
repaired is in `Registry.notes`, for the answer of the call that noticed.

A file cannot be moved aside under an open SQLite connection: the connection keeps writing to
the moved file, through the WAL files of the new one at the old name. So every connection holds
a shared lock on `state.db.init.lock` while it is open, and creating or repairing the file takes
it exclusively, after the other connections of every process have closed.

The rows' types and the tables are `run_records`'; rebuilding from the run directories is
`rebuild`'s.
"""

from __future__ import annotations

import functools
import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel, ValidationError

from mcp_rl import redact
from mcp_rl.errors import DamagedState, UserError, clip
from mcp_rl.locking import LockTimeout, exclusive_lock, shared_lock
from mcp_rl.supervisor.rebuild import REBUILT_CAUSE, rebuild, salvage
from mcp_rl.supervisor.run_records import (
    SCHEMA,
    EventRecord,
    ProcessRecord,
    RunRecord,
    insert_event,
    scrubbed,
)
from mcp_rl.supervisor.states import ACTIVE_STATES, ALLOWED_FROM, ProcState, RunState

if TYPE_CHECKING:
    from mcp_rl.settings import Settings

__all__ = ["EventRecord", "ProcessRecord", "Registry", "RunRecord", "registry_for"]

log = logging.getLogger(__name__)

BUSY_TIMEOUT_MS = 10_000
# SQLite's result codes for a file that is not (or no longer) a sound database.
_DAMAGED_CODES = frozenset({11, 26})  # SQLITE_CORRUPT, SQLITE_NOTADB
T = TypeVar("T")
_LOGGED_NOTES: set[str] = set()
# The state.db paths whose init lock this thread holds exclusively: its own connections there
# must not ask for the shared lock (a second flock on the same file would wait for itself).
_HELD = threading.local()
M = TypeVar("M", bound=BaseModel)
# Columns of `runs` newer than some state.db files in use; added on first open.
_ADDED_RUN_COLUMNS = ("launcher", "job_id", "job_address")
_MIGRATED: set[Path] = set()

_RUN_FIELDS = frozenset(RunRecord.model_fields) - {"run_id"}
_PROCESS_FIELDS = frozenset(ProcessRecord.model_fields) - {"run_id", "name"}


def _is_damage(exc: sqlite3.Error, path: Path) -> bool:
    return getattr(exc, "sqlite_errorcode", None) in _DAMAGED_CODES or path.is_dir()


def _guarded(method: Callable[..., T]) -> Callable[..., T]:
    """A registry operation that survives a damaged database (kept aside, rebuilt, retried once)
    and turns any other SQLite failure into an error that says what to do."""

    @functools.wraps(method)
    def wrapper(self: Registry, *args: Any, **kwargs: Any) -> T:
        try:
            return method(self, *args, **kwargs)
        except sqlite3.Error as exc:
            if not _is_damage(exc, self.path):
                raise self._unusable(exc) from exc
            self._recover(exc)
        try:
            return method(self, *args, **kwargs)
        except sqlite3.Error as exc:
            raise self._unusable(exc) from exc

    return wrapper


class Registry:
    """Access to the run tables of one `state.db`. Cheap to create; holds no connection."""

    def __init__(self, path: Path, runs_dir: Path | None = None) -> None:
        self.path = Path(path)
        # Where the run directories are, to rebuild from (the state directory's runs/).
        self.runs_dir = Path(runs_dir) if runs_dir is not None else self.path.parent / "runs"
        # Repairs this object made or found (kept aside, rebuilt, rows skipped), in words.
        self.notes: list[str] = []
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._open()

    @property
    def _init_lock(self) -> Path:
        return self.path.with_name(self.path.name + ".init.lock")

    @contextmanager
    def _exclusive(self) -> Iterator[None]:
        """This thread alone may use the file (create it, move it aside): every other connection,
        in any process, has closed and new ones wait."""
        held: set[Path] = _HELD.__dict__.setdefault("paths", set())
        with self._lock(exclusive_lock):
            held.add(self.path)
            try:
                yield
            finally:
                held.discard(self.path)

    @_guarded
    def _open(self) -> None:
        # Created once per file; afterwards opening costs one read (status calls stay fast).
        if self._has_schema():
            self._add_columns()
            return
        # Switching to WAL needs an exclusive lock, and SQLite refuses it at once (no busy wait) while
        # a second opener is creating tables, so first openers take turns on a lock file.
        with self._exclusive():
            if self._has_schema():
                return
            self._create(why="missing" if not self.path.exists() else "empty")

    def _add_columns(self) -> None:
        """Columns added after a state.db was made (the cluster launchers' job columns); checked
        once per file and process."""
        if self.path in _MIGRATED:
            return
        with self._connect() as db:
            have = {row[1] for row in db.execute("PRAGMA table_info(runs)").fetchall()}
            for name in _ADDED_RUN_COLUMNS:
                if name not in have:
                    try:
                        db.execute(f"ALTER TABLE runs ADD COLUMN {name} TEXT")
                    except sqlite3.OperationalError as exc:
                        if "duplicate column" not in str(exc):  # another process added it first
                            raise
        _MIGRATED.add(self.path)

    def _create(self, why: str, salvage_from: Path | None = None) -> None:
        """Tables, and the runs of the run directories: a missing or empty state.db (deleted, or
        left empty by a crash) must not hide the runs that exist. Rows still readable in a damaged
        copy (`salvage_from`) come first: they know more (pids, causes) than the directories.
        Call under the init lock."""
        with self._connect() as db:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("BEGIN IMMEDIATE")
            try:
                for statement in SCHEMA.split(";"):
                    if statement.strip():
                        db.execute(statement)
                if salvage_from is not None:
                    saved = salvage(db, salvage_from)
                    if saved:
                        self._note(
                            f"{len(saved)} run(s) were still readable in the damaged copy and kept: {', '.join(saved)}."
                        )
                rebuilt = rebuild(db, self.runs_dir)
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")
        if rebuilt:
            self._note(
                f"state.db was {why}; {len(rebuilt)} run(s) were rebuilt from {self.runs_dir}: {', '.join(rebuilt)}."
            )

    def _recover(self, exc: sqlite3.Error) -> None:
        """Move a damaged state.db (and its WAL files) aside and rebuild it; another process may
        have done so already, which is checked under the init lock."""
        with self._exclusive():
            if not self.path.is_dir():
                try:
                    if self._has_schema() and self._sound():
                        return  # repaired meanwhile by another process
                except sqlite3.Error:
                    pass
            stamp = time.strftime("%Y%m%dT%H%M%S")
            aside = self.path.with_name(
                f"{self.path.stem}.damaged-{stamp}-{time.time_ns() % 10**6:06d}{self.path.suffix}"
            )
            self.path.replace(aside)
            for suffix in ("-wal", "-shm"):
                extra = self.path.with_name(self.path.name + suffix)
                if extra.exists():
                    extra.replace(aside.with_name(aside.name + suffix))
            reason = "a directory" if aside.is_dir() else str(exc)
            self._note(f"state.db was damaged ({reason}); it was kept as {aside} (nothing was deleted).")
            self._create(why="damaged", salvage_from=None if aside.is_dir() else aside)

    def _sound(self) -> bool:
        with self._connect() as db:
            return bool(db.execute("PRAGMA quick_check").fetchone()[0] == "ok")

    def _note(self, text: str) -> None:
        # Once per process: the run watcher lists runs every second, a bad row would flood the log.
        if text not in _LOGGED_NOTES and len(_LOGGED_NOTES) < 1000:
            _LOGGED_NOTES.add(text)
            log.warning("%s", text)
        self.notes.append(text)

    def _unusable(self, exc: sqlite3.Error) -> UserError:
        what = "busy: another process holds it locked" if "locked" in str(exc) else str(exc)
        return UserError(
            f"The run registry {self.path} could not be used ({what}). Runs and their files are safe in "
            f"{self.runs_dir}. Try again; if it persists, check the file's permissions and free disk space."
        )

    def _has_schema(self) -> bool:
        with self._connect() as db:
            return (
                # The schema script's last statement: present only once all of it ran.
                db.execute("SELECT 1 FROM sqlite_master WHERE type = 'index' AND name = 'run_events_by_run'").fetchone()
                is not None
            )

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        with self._shared():
            db = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None)
            try:
                db.row_factory = sqlite3.Row
                db.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
                db.execute("PRAGMA synchronous=NORMAL")
                yield db
            finally:
                db.close()

    @contextmanager
    def _shared(self) -> Iterator[None]:
        """Keeps the file where it is while a connection is open (see the module's docstring)."""
        if self.path in getattr(_HELD, "paths", ()):
            yield  # this thread holds it exclusively already
            return
        with self._lock(shared_lock):
            yield

    def _lock(self, kind: Callable[..., AbstractContextManager[None]]) -> ExitStack:
        """The init lock taken (`exclusive_lock` or `shared_lock`), held until the stack closes.
        Failing to take it is a registry failure in words (busy, or a home that cannot be
        written), never a bare exception from the lock's body."""
        stack = ExitStack()
        try:
            stack.enter_context(kind(self._init_lock, timeout_s=BUSY_TIMEOUT_MS / 1000))
        except LockTimeout as exc:
            raise sqlite3.OperationalError(f"database is locked ({exc})") from exc
        except OSError as exc:
            raise sqlite3.OperationalError(f"its lock file cannot be opened ({exc})") from exc
        return stack

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
    @_guarded
    def create_run(self, record: RunRecord, cause: str | None = None) -> None:
        cause = scrubbed(cause)
        data = redact.scrub_json(record.model_dump(mode="json"))
        columns = ", ".join(data)
        marks = ", ".join("?" for _ in data)
        with self._write() as db:
            # A row rebuilt from the run directory (state.db was recreated while this run was being
            # started) is a guess; the run's own record replaces it.
            db.execute("DELETE FROM runs WHERE run_id = ? AND cause LIKE ?", (record.run_id, REBUILT_CAUSE + "%"))
            db.execute(f"INSERT INTO runs ({columns}) VALUES ({marks})", tuple(data.values()))
            insert_event(db, record.run_id, "run", record.state, cause, record.created_at)

    @_guarded
    def get_run(self, run_id: str) -> RunRecord | None:
        with self._connect() as db:
            row = db.execute("SELECT * FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        if row is None:
            return None
        try:
            return RunRecord.model_validate(dict(row))
        except ValidationError as exc:
            raise DamagedState(
                f"The registry row of run {run_id!r} is damaged ({_first_error(exc)}). Its files are intact in "
                f"{self.runs_dir / run_id}; read them with the run's resources, or move state.db aside to rebuild it."
            ) from None

    @_guarded
    def list_runs(self, states: frozenset[RunState] | None = None) -> list[RunRecord]:
        """Runs newest first (optionally only those in `states`); a damaged row is noted and skipped."""
        with self._connect() as db:
            rows = db.execute("SELECT * FROM runs ORDER BY rowid DESC").fetchall()
        runs = self._valid_rows(rows, RunRecord, lambda row: f"Run {row['run_id']!r}")
        runs.sort(key=lambda r: r.created_at, reverse=True)  # stable: equal times stay newest row first
        return [r for r in runs if states is None or r.state in states]

    @_guarded
    def update_run(self, run_id: str, **fields: Any) -> None:
        """Set plain fields of a run (ports, supervisor pid, W&B url). Never the state."""
        unknown = set(fields) - _RUN_FIELDS | ({"state", "cause"} & set(fields))
        if unknown:
            raise ValueError(f"not updatable run fields: {sorted(unknown)}")
        fields["updated_at"] = time.time()
        assignments = ", ".join(f"{name} = ?" for name in fields)
        with self._write() as db:
            db.execute(f"UPDATE runs SET {assignments} WHERE run_id = ?", (*fields.values(), run_id))

    @_guarded
    def transition(self, run_id: str, new: RunState, cause: str | None = None) -> bool:
        """Move a run to `new` if its current state allows it; False if it did not.

        The check and the write are one statement, so concurrent writers are safe.
        """
        allowed = ALLOWED_FROM[new]
        cause = scrubbed(cause)
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
                insert_event(db, run_id, "run", new, cause, now)
        return bool(changed)

    def active_ports(self) -> set[int]:
        """Ports recorded for runs that may still hold them."""
        ports: set[int] = set()
        for run in self.list_runs(ACTIVE_STATES):
            ports.update(p for p in (run.api_port, run.inference_port) if p)
        return ports

    # --- processes -------------------------------------------------------------------------
    @_guarded
    def set_process(self, run_id: str, name: str, cause: str | None = None, **fields: Any) -> None:
        """Insert or update one process row; a change of `state` is also recorded as an event."""
        unknown = set(fields) - _PROCESS_FIELDS
        if unknown:
            raise ValueError(f"unknown process fields: {sorted(unknown)}")
        cause = scrubbed(cause)
        fields = {k: redact.scrub(v) if type(v) is str else v for k, v in fields.items()}
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
                insert_event(db, run_id, name, ProcState(fields["state"]), cause, now)

    @_guarded
    def ended_runs_with_live_processes(self) -> list[str]:
        """Ended runs with a process still recorded as starting or running (an interrupted clean-up)."""
        with self._connect() as db:
            rows = db.execute(
                "SELECT DISTINCT p.run_id FROM run_processes p JOIN runs r ON r.run_id = p.run_id"
                " WHERE r.state IN ('completed', 'failed', 'stopped') AND p.state IN ('starting', 'running')"
            ).fetchall()
        return [row[0] for row in rows]

    @_guarded
    def processes(self, run_id: str) -> list[ProcessRecord]:
        with self._connect() as db:
            rows = db.execute("SELECT * FROM run_processes WHERE run_id = ?", (run_id,)).fetchall()
        return self._valid_rows(rows, ProcessRecord, lambda row: f"Process {row['name']!r} of run {run_id!r}")

    def _valid_rows(self, rows: list[sqlite3.Row], model: type[M], name: Callable[[sqlite3.Row], str]) -> list[M]:
        """The rows that read as `model`; each other one is noted (by `name`) and skipped."""
        records = []
        for row in rows:
            try:
                records.append(model.model_validate(dict(row)))
            except ValidationError as exc:
                self._note(f"{name(row)} was skipped: its registry row is damaged ({_first_error(exc)}).")
        return records

    # --- events and status checks ----------------------------------------------------------
    @_guarded
    def record_event(self, run_id: str, subject: str, state: str, cause: str | None = None) -> None:
        """An event that changes no state (e.g. a held process released)."""
        with self._write() as db:
            insert_event(db, run_id, subject, state, cause, time.time())

    @_guarded
    def events(self, run_id: str) -> list[EventRecord]:
        with self._connect() as db:
            rows = db.execute(
                "SELECT run_id, time, subject, state, cause FROM run_events WHERE run_id = ? ORDER BY id",
                (run_id,),
            ).fetchall()
        events = []
        for row in rows:
            try:
                events.append(EventRecord.model_validate(dict(row)))
            except ValidationError:
                continue  # history only; the run's state is in its own row
        return events


def registry_for(settings: Settings) -> Registry:
    """The registry of a state directory (created on first use)."""
    settings.ensure_home()
    return Registry(settings.state_db, settings.runs_dir)


def _first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err["loc"])
    return f"{where}: {err['msg']} (got {clip(err.get('input'), 60)})"
