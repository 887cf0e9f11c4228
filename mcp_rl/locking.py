"""An exclusive lock on a file beside the thing it guards, held across threads and processes."""

from __future__ import annotations

import fcntl
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def exclusive_lock(lock_path: Path) -> Iterator[None]:
    """Block until this process alone holds `lock_path`; released on exit, or by the kernel if we die."""
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
