"""Local checkpoint retention: which checkpoint folders of a run stay on disk.

Kept: the final one, every one marked kept (the last of a stopped or failed run, or one a user
chose with rl_keep_checkpoint), and the newest `keep_last` steps (the newest is what a resume
loads). `keep_last == 0` keeps every one. A checkpoint an export or an evaluation has leased
stays while the lease lasts. Only folders inside the run's `checkpoints/` are ever deleted; a
remote (tinker://) path is never touched here. Pruning takes the run's checkpoint lock, as keep
and delete do, so a checkpoint kept meanwhile is never pruned.
"""

from __future__ import annotations

import logging
import os
import shutil
import stat
from pathlib import Path

from mcp_rl.rundir import CheckpointRecord, active_leases, checkpoint_lock, leased_by, read_index

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
    with checkpoint_lock(index.parent):
        records = read_index(index).records
        leases = active_leases(index.parent)
        keep = protected_steps(records, keep_last)
        protected: set[Path] = set()
        candidates: set[Path] = set()
        for record in records:
            folder = step_folder(record, checkpoints_dir)
            if folder is None:
                continue
            leased = leased_by(record.path, leases) is not None
            (protected if record.step in keep or leased else candidates).add(folder)
        deleted = []
        for folder in sorted(candidates - protected):
            if folder.is_dir() and not folder.is_symlink():
                shutil.rmtree(folder, ignore_errors=True)
                deleted.append(folder)
    if deleted:
        log.info("retention: deleted %d old checkpoint folder(s) (keep_last=%d)", len(deleted), keep_last)
    return deleted


def disk_bytes(folder: Path) -> int:
    """Bytes of the regular files under `folder` (0 when it does not exist); links not followed.
    What is deleted while we walk (retention, a delete in another call) is not counted."""
    total = 0
    for root, _dirs, files in os.walk(folder):  # os.walk skips folders that vanish meanwhile
        for name in files:
            try:
                st = os.lstat(os.path.join(root, name))
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode):
                total += st.st_size
    return total
