"""Background jobs' workers, started and watched one way: smoke tests (mcp_rl.inference_test),
checkpoint evaluations (mcp_rl.evaluation) and exports (mcp_rl.weights.jobs).

Each job has a folder holding its spec and its status (the job kind's own formats) and
`worker.json`, the `WorkerRecord` written here when the worker starts. The worker is spawned
through mcp_rl.processes (its own session, a marker its children inherit, output to a log),
reaped when it ends (a long-lived server keeps no zombie), and told alive or dead by pid and
start time (a recycled pid or a zombie is dead). A job whose status still says running while its
worker is dead has failed; each kind then records that in its own status.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from pydantic import BaseModel

from mcp_rl import processes
from mcp_rl.runconfig import write_text_atomic

WORKER_FILE = "worker.json"


class WorkerRecord(BaseModel):
    """Who runs a job: a reader tells a live worker from a dead one by pid and start time; the
    marker proves it ours before anything is signalled (mcp_rl.processes)."""

    pid: int
    pgid: int
    create_time: float
    started_at: float
    marker: str | None = None


def start_worker(
    argv: Sequence[str],
    folder: Path,
    log_path: Path,
    env: Mapping[str, str],
    *,
    marker: str,
    cwd: Path | None = None,
    pass_fds: Sequence[int] = (),
) -> WorkerRecord:
    """Spawn a job's worker, reap it in the background, and record it in `folder/worker.json`."""
    proc = processes.spawn(argv, log_path, env, cwd=cwd, marker=marker, pass_fds=pass_fds)
    processes.reap_in_background(proc)
    ident = processes.identify(proc.pid)
    record = WorkerRecord(
        pid=proc.pid,
        pgid=ident.pgid if ident else proc.pid,
        create_time=ident.create_time if ident else 0.0,
        started_at=time.time(),
        marker=marker,
    )
    write_text_atomic(folder / WORKER_FILE, record.model_dump_json())
    return record


def read_worker(folder: Path) -> WorkerRecord | None:
    """The job's worker record (None: not written yet, or unreadable)."""
    try:
        return WorkerRecord.model_validate_json((folder / WORKER_FILE).read_text(encoding="utf-8"))
    except (FileNotFoundError, ValueError):
        return None


def worker_alive(folder: Path) -> bool:
    """Whether the job's worker still runs. No record yet counts as alive: it is written right
    after the spawn, and a reader may be a few milliseconds early."""
    record = read_worker(folder)
    if record is None:
        return True
    return processes.is_alive(record.pid, record.create_time or None)
