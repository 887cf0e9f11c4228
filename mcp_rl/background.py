"""Background jobs' workers, started and watched one way: smoke tests (mcp_rl.inference_test),
checkpoint evaluations (mcp_rl.evaluation) and exports (mcp_rl.weights.jobs).

Each job has a folder holding its spec and its status (the job kind's own formats) and
`worker.json`, the `WorkerRecord` written here when the worker starts. The worker is spawned
through mcp_rl.processes (its own session, a marker its children inherit, output to a log),
reaped when it ends (a long-lived server keeps no zombie), and told alive or dead by pid and
start time (a recycled pid or a zombie is dead). A job whose status still says running while its
worker is dead has failed; each kind then records that in its own status. Cancelling stops the
worker's group (SIGTERM, its cue to end cleanly, then SIGKILL after a grace), once its identity
is proven, and records that a cancel stopped it (`cancel.json`: an MCP task over a job whose own
status has no cancelled state, an export, still reads as cancelled). Every kind is waited for by
one loop, `wait_for_job` (so is a run's stop, in mcp_rl.supervisor.stop_wait).

Every job has one id format (`new_job_id`, checked by `JOB_ID_RE`) and every worker one entry
point (`worker_main`: its arguments, a log scrubbed of every key, SIGTERM/SIGINT as its cue to
stop, the descriptors the server handed it closed when the job ends, and its exit code).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import secrets
import signal
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, TypeVar

import anyio
from pydantic import BaseModel

from mcp_rl import processes, redact
from mcp_rl.atomic import write_text_atomic
from mcp_rl.settings import Settings

WORKER_FILE = "worker.json"
CANCEL_FILE = "cancel.json"
POLL_S = 0.5

# A job's id (smoke test, evaluation, export): a folder name, so letters, digits, - and _ only.
JOB_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")

T = TypeVar("T")
log = logging.getLogger(__name__)


def new_job_id() -> str:
    """A fresh job id: its start in UTC (ids sort by start) and 6 random hex digits."""
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + secrets.token_hex(3)


class JobWorker(Protocol):
    """What `worker_main` runs: `run()` does the job and returns the state it ended in; `stop`,
    set at SIGTERM/SIGINT, asks it to end early and cleanly (None: the job has no clean early
    end, so those signals end the process as they would)."""

    @property
    def stop(self) -> threading.Event | None: ...

    def run(self) -> str: ...


def worker_main(
    argv: Sequence[str] | None,
    *,
    module: str,
    description: str,
    make: Callable[[Path, Settings], JobWorker],
    succeeded: Collection[str],
    folder_flag: str = "--dir",
) -> int:
    """The one entry point of a job's worker, `python -m MODULE --dir FOLDER [--held-fd N ...]`:
    everything it writes scrubbed of every key (mcp_rl.redact), SIGTERM/SIGINT setting the
    worker's `stop`, the descriptors the server handed it (a lease, a claim) closed as soon as
    the job has ended, and exit code 0 when the job ended in one of `succeeded`."""
    parser = argparse.ArgumentParser(prog=f"python -m {module}", description=description)
    parser.add_argument(folder_flag, dest="folder", type=Path, required=True)
    parser.add_argument("--held-fd", dest="held_fds", type=int, action="append", default=[])
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    redact.install_log_filter()  # no key in a log (mcp_rl.redact)
    redact.scrub_std_streams()  # nor in a traceback or a library's print
    folder = args.folder.resolve()
    try:
        worker = make(folder, Settings.from_env())
        stop = worker.stop
        if stop is not None:

            def on_signal(signum: int, _frame: Any) -> None:
                log.info("signal %s: stopping job %s", signum, folder.name)
                stop.set()

            signal.signal(signal.SIGTERM, on_signal)
            signal.signal(signal.SIGINT, on_signal)
        state = worker.run()
    finally:
        for fd in args.held_fds:
            try:
                os.close(fd)
            except OSError:
                pass
    log.info("job %s: %s", folder.name, state)
    return 0 if state in succeeded else 1


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


def cancel_worker(folder: Path, marker: str, grace_s: float) -> bool:
    """Stop the job's worker and everything it started (its process group): SIGTERM first, SIGKILL
    after `grace_s`. Signals only a worker proven ours: pid, start time and `marker`, which the
    caller derives from the job (not read from the record whose pid it checks). False when there
    was no live worker to stop."""
    record = read_worker(folder)
    if record is None or not processes.is_alive(record.pid, record.create_time or None):
        return False
    if processes.prove(record.pid, record.create_time or None, marker).liveness != processes.Liveness.UNPROVEN:
        # Recorded before the signal: whoever reads the job's end reads the cancel with it.
        write_text_atomic(folder / CANCEL_FILE, json.dumps({"cancelled_at": time.time()}))
    processes.stop_group(record.pid, record.pgid, record.create_time or None, grace_s, marker=marker)
    return True


def cancelled(folder: Path) -> bool:
    """Whether the job's worker was stopped by a cancel (`cancel_worker`), by whichever server."""
    return (folder / CANCEL_FILE).is_file()


async def wait_for_job(
    read: Callable[[], T],
    running: Callable[[T], bool],
    timeout_s: float,
    on_read: Callable[[T], Awaitable[None]] | None = None,
    poll_s: float = POLL_S,
) -> T:
    """Read a job's status (on a worker thread: reads touch the disk) until it has ended or
    `timeout_s` has passed, whichever is first, and return the last read. `on_read` sees every
    read (progress reports); a job still running at the deadline is returned as it is: it goes on
    without the caller."""
    deadline = time.monotonic() + max(0.0, timeout_s)
    while True:
        status = await anyio.to_thread.run_sync(read)
        if on_read is not None:
            await on_read(status)
        left = deadline - time.monotonic()
        if not running(status) or left <= 0:
            return status
        await anyio.sleep(min(poll_s, left))
