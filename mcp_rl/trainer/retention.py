"""Local checkpoint retention: which checkpoint folders of a run stay on disk.

Kept: the final one, every one marked kept (the last of a stopped or failed run, or one a user
chose with rl_keep_checkpoint), and the newest `keep_last` steps (the newest is what a resume
loads). `keep_last == 0` keeps every one. Only folders inside the run's `checkpoints/` are ever
deleted; a remote (tinker://) path is never touched here.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

from mcp_rl.rundir import CheckpointRecord, read_checkpoints

log = logging.getLogger(__name__)


def step_folder(record: CheckpointRecord, checkpoints_dir: Path) -> Path | None:
    """The checkpoint folder a local record lives in (`checkpoints/<name>`), None if remote or
    outside the run's checkpoints folder."""
    if "://" in record.path:
        return None
    path = Path(record.path).resolve()
    root = checkpoints_dir.resolve()
    if path == root or root not in path.parents:
        return None
    return root / path.relative_to(root).parts[0]


def protected_steps(records: list[CheckpointRecord], keep_last: int) -> set[int]:
    """Steps whose checkpoints stay: final, kept, and the newest `keep_last` steps."""
    steps = sorted({r.step for r in records})
    keep = {r.step for r in records if r.final or r.kept}
    if keep_last <= 0:
        return set(steps)
    keep.update(steps[-keep_last:])
    return keep


def prune(checkpoints_dir: Path, index: Path, keep_last: int) -> list[Path]:
    """Delete the local checkpoint folders retention does not keep; returns what was deleted.
    A folder shared by a protected step (never the case with one folder per step) is kept."""
    records = read_checkpoints(index).records
    keep = protected_steps(records, keep_last)
    protected: set[Path] = set()
    candidates: set[Path] = set()
    for record in records:
        folder = step_folder(record, checkpoints_dir)
        if folder is None:
            continue
        (protected if record.step in keep else candidates).add(folder)
    deleted = []
    for folder in sorted(candidates - protected):
        if folder.is_dir() and not folder.is_symlink():
            shutil.rmtree(folder, ignore_errors=True)
            deleted.append(folder)
    if deleted:
        log.info("retention: deleted %d old checkpoint folder(s) (keep_last=%d)", len(deleted), keep_last)
    return deleted


def disk_bytes(folder: Path) -> int:
    """Bytes of the regular files under `folder` (0 when it does not exist); links not followed."""
    total = 0
    if not folder.is_dir():
        return 0
    for path in folder.rglob("*"):
        try:
            if path.is_file() and not path.is_symlink():
                total += path.stat().st_size
        except OSError:  # deleted while we walked (retention, a user)
            continue
    return total
