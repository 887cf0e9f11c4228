"""The one lock module: `lock_fd` and `is_held`, the one "is it held?" probe (flock locks belong
to an open file, so two opens in this process stand for two holders)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mcp_rl.locking import LockTimeout, exclusive_lock, is_held, lock_fd, shared_lock


def _open(path: Path) -> int:
    return os.open(path, os.O_RDWR | os.O_CREAT, 0o600)


def test_a_missing_or_free_lock_file_is_not_held(tmp_path: Path) -> None:
    assert not is_held(tmp_path / "never.lock")
    assert not (tmp_path / "never.lock").exists()  # the probe creates nothing
    (tmp_path / "free.lock").write_text("")
    assert not is_held(tmp_path / "free.lock")


@pytest.mark.parametrize("shared", [True, False])
def test_a_lock_held_by_another_open_file_is_seen_and_not_taken(tmp_path: Path, shared: bool) -> None:
    path = tmp_path / "lease.json"
    holder = _open(path)
    try:
        assert lock_fd(holder, shared=shared)
        assert is_held(path)
        other = _open(path)
        try:
            assert not lock_fd(other, wait=False)  # exclusive, without waiting: refused at once
        finally:
            os.close(other)
        assert is_held(path)  # the probe let go of nothing it did not take
    finally:
        os.close(holder)
    assert not is_held(path)  # closing the holder's descriptor ended the lock


def test_the_context_locks_are_held_while_inside_and_time_out_against_a_holder(tmp_path: Path) -> None:
    path = tmp_path / "work.lock"
    with exclusive_lock(path):
        assert is_held(path)
        with pytest.raises(LockTimeout), shared_lock(path, timeout_s=0.05):
            pass
    assert not is_held(path)
    with shared_lock(path), shared_lock(path, timeout_s=0.05):
        assert is_held(path)


PACKAGE = Path(__file__).resolve().parents[1] / "mcp_rl"


def test_locks_and_whole_file_writes_each_have_one_home() -> None:
    """flock only in locking.py (no third-party lock package), os.replace/os.rename only in
    atomic.py: a new hand-written lock or temp-then-replace elsewhere fails here."""
    strays = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        text = path.read_text(encoding="utf-8")
        if rel != "locking.py" and ("import fcntl" in text or "filelock" in text):
            strays.append(f"{rel}: a lock outside mcp_rl/locking.py")
        if rel != "atomic.py" and ("os.replace(" in text or "os.rename(" in text):
            strays.append(f"{rel}: a rename outside mcp_rl/atomic.py")
    assert strays == []
