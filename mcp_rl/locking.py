"""Locks on a file beside the thing they guard, held across threads and processes.

`flock` locks belong to an open file, not to a process, so two threads of one process exclude
each other as two processes do; the kernel releases them if the holder dies.

The one home of `flock` in mcp_rl: `exclusive_lock`/`shared_lock` around a piece of work,
`lock_fd` for a lock that outlives the call (a claim or lease handed to a worker with
`pass_fds`, or a try-once "is another at work?"), and `is_held`, the one "is it held?" probe.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

# Polling a non-blocking flock: the first retry comes fast (holders keep these locks for
# milliseconds), later ones back off so a long wait does not spin.
_FIRST_RETRY_S = 0.002
_MAX_RETRY_S = 0.05


class LockTimeout(TimeoutError):
    """The lock stayed held by someone else until the deadline."""


@contextmanager
def exclusive_lock(lock_path: Path, timeout_s: float | None = None) -> Iterator[None]:
    """Block until this open file alone holds `lock_path` (or raise `LockTimeout` after `timeout_s`)."""
    with _flock(lock_path, fcntl.LOCK_EX, timeout_s):
        yield


@contextmanager
def shared_lock(lock_path: Path, timeout_s: float | None = None) -> Iterator[None]:
    """Held together with other shared holders; excludes (and waits for) an exclusive holder."""
    with _flock(lock_path, fcntl.LOCK_SH, timeout_s):
        yield


@contextmanager
def _flock(lock_path: Path, mode: int, timeout_s: float | None) -> Iterator[None]:
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "a") as lock:
        if timeout_s is None:
            fcntl.flock(lock, mode)
        else:
            _acquire_by(lock, mode, time.monotonic() + timeout_s, lock_path)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _acquire_by(lock: IO[str], mode: int, deadline: float, lock_path: Path) -> None:
    delay = _FIRST_RETRY_S
    while True:
        try:
            fcntl.flock(lock, mode | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise LockTimeout(f"{lock_path} stayed locked by another holder") from None
            time.sleep(min(delay, remaining))
            delay = min(delay * 2, _MAX_RETRY_S)


def lock_fd(fd: int, *, shared: bool = False, wait: bool = True) -> bool:
    """Lock the open file `fd` (held while any process holds that descriptor open). `wait=False`:
    take it only if free, else return False at once; `wait=True` blocks and returns True."""
    mode = fcntl.LOCK_SH if shared else fcntl.LOCK_EX
    try:
        fcntl.flock(fd, mode if wait else mode | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def is_held(lock_path: Path) -> bool:
    """Whether any open file (shared or exclusive) holds a lock on `lock_path` right now; a
    missing file is held by nobody. The probe takes the lock for an instant and lets it go, so
    call it where a holder cannot be arriving at that instant (under the guarding lock) or where
    a false "held" only postpones (a watcher's next poll)."""
    try:
        fd = os.open(lock_path, os.O_RDONLY)
    except OSError:
        return False
    try:
        return not lock_fd(fd, wait=False)
    finally:
        os.close(fd)  # closing releases the lock the probe took
