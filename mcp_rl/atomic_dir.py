"""Folders that appear whole: built beside their destination, then renamed in.

Checkpoints and exports are written into a temporary sibling (same filesystem, so `os.replace`
is atomic) and only then put in place; a reader sees the old folder or the new one, never a mix,
and a failure leaves the old one where it was.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path


def temp_sibling(target: Path) -> Path:
    """A fresh temporary path next to `target` (same filesystem, so os.replace is atomic)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    return target.with_name(f".{target.name}.tmp-{os.getpid()}-{time.monotonic_ns()}")


def replace_dir(new: Path, target: Path) -> None:
    """Put folder `new` at `target`, replacing any folder there (moved aside first: a rename
    cannot replace a non-empty folder; put back if the second rename fails)."""
    old = None
    if target.exists():
        old = temp_sibling(target)
        os.replace(target, old)
    try:
        os.replace(new, target)
    except BaseException:
        if old is not None:
            os.replace(old, target)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
