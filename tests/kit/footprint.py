"""What a state directory holds, to show that a read wrote nothing."""

from __future__ import annotations

import sqlite3
from pathlib import Path


def state_footprint(home: Path) -> dict[str, object]:
    """Every file's bytes, except the registry's, whose committed content is compared instead.
    SQLite moves bytes between state.db and its -wal without any write: a reader opening the
    database creates an empty -wal, the last connection closing checkpoints and deletes it, so
    the files' bytes depend on whether the server's watcher happens to hold a connection at the
    moment of the footprint (a failure on a loaded machine). A write shows in the dump."""
    files: dict[str, object] = {
        str(p): (p.stat().st_size, p.stat().st_mtime_ns, p.read_bytes())
        for p in sorted(home.rglob("*"))
        if p.is_file() and p.name not in ("state.db", "state.db-wal", "state.db-shm")
    }
    db = sqlite3.connect(f"file:{home / 'state.db'}?mode=ro", uri=True)
    try:
        files["state.db (committed content)"] = list(db.iterdump())
    finally:
        db.close()
    return files
