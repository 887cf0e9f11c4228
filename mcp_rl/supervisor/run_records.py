"""The rows of the run registry (`registry`): the tables of `state.db`, a run, a process and an
event as typed records, and how an event is written (its cause scrubbed of keys: it may quote
what a task raised).
"""

from __future__ import annotations

import sqlite3

from pydantic import BaseModel

from mcp_rl import redact
from mcp_rl.supervisor.states import ACTIVE_STATES, ProcState, RunState

SCHEMA = """
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
    wandb_url TEXT,
    launcher TEXT,
    job_id TEXT,
    job_address TEXT
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
    launcher: str | None = None  # None or "local": this machine; "slurm"/"ray": a cluster job
    job_id: str | None = None  # the scheduler's job id (cluster launchers)
    job_address: str | None = None  # where the scheduler is asked (Ray's dashboard address)

    @property
    def active(self) -> bool:
        return self.state in ACTIVE_STATES

    @property
    def on_cluster(self) -> bool:
        return self.launcher not in (None, "local") and self.job_id is not None


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


def scrubbed(cause: str | None) -> str | None:
    """A cause as it may be stored: without any key (it may quote what a task raised)."""
    return redact.scrub(cause) if cause else cause


def insert_event(db: sqlite3.Connection, run_id: str, subject: str, state: str, cause: str | None, when: float) -> None:
    db.execute(
        "INSERT INTO run_events (run_id, time, subject, state, cause) VALUES (?, ?, ?, ?, ?)",
        (run_id, when, subject, str(state), scrubbed(cause)),
    )
