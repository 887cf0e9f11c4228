"""Files and folders that appear whole: written beside their destination, then renamed in.

A state file (`write_text_atomic`), a file a library writes to a path we give it
(`file_written_whole`, e.g. `torch.save`) and a checkpoint or export folder (`temp_sibling`,
`replace_dir`, ...) are written into a temporary sibling (same filesystem, so `os.replace` is
atomic) and only then put in place; a reader sees the old one or the new one, never a mix or
half, and a failure leaves the old one where it was.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def write_text_atomic(path: Path, text: str) -> None:
    """`text` as the whole of `path`: a temporary sibling, flushed to disk, renamed over it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@contextmanager
def file_written_whole(target: Path) -> Iterator[Path]:
    """A temporary sibling path for a writer that wants a path (`torch.save(obj, tmp)`): renamed
    over `target` when the block ends normally, removed when it raises. Not fsynced (the writers
    are large checkpoint files; a crash leaves the old file, or the new one whole)."""
    tmp = temp_sibling(target)
    try:
        yield tmp
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def temp_sibling(target: Path) -> Path:
    """A fresh temporary path next to `target` (same filesystem, so os.replace is atomic)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    return target.with_name(f".{target.name}.tmp-{os.getpid()}-{time.monotonic_ns()}")


def aside_sibling(target: Path, pid: int | None = None) -> Path:
    """Where `replace_dir` moves the folder it replaces for a moment. Named apart from the
    temporary folders (`.tmp-`), which are unfinished output: this one is the user's old folder."""
    return target.with_name(f".{target.name}.old-{os.getpid() if pid is None else pid}-{time.monotonic_ns()}")


def recover_aside(target: Path, pid: int) -> list[Path]:
    """After writer `pid` died inside `replace_dir`: a folder it had moved aside goes back to
    `target` when nothing took its place, and is removed only when the new folder is whole at
    `target`. Returns the folders removed (the restored one is not among them)."""
    removed = []
    for old in sorted(target.parent.glob(f".{target.name}.old-{pid}-*")):
        if not old.is_dir() or old.is_symlink():
            continue
        if not target.exists() and not target.is_symlink():
            os.replace(old, target)
        else:
            shutil.rmtree(old, ignore_errors=True)
            removed.append(old)
    return removed


def replace_dir(new: Path, target: Path) -> None:
    """Put folder `new` at `target`, replacing any folder there (moved aside first: a rename
    cannot replace a non-empty folder; put back if the second rename fails, or by
    `recover_aside` if this process dies between the two renames)."""
    old = None
    if target.exists():
        old = aside_sibling(target)
        os.replace(target, old)
    try:
        os.replace(new, target)
    except BaseException:
        if old is not None:
            os.replace(old, target)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
