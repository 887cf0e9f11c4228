"""Reading the end of growing files (logs, metrics.jsonl) without reading them whole."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

_CHUNK = 64 * 1024


def tail_lines(path: Path, count: int, max_bytes: int = 4 * 1024 * 1024) -> list[str]:
    """The last `count` complete lines of `path` (fewer if the file is shorter), read from the end."""
    if count <= 0:
        return []
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            end = position = fh.tell()
            data = b""
            while position > 0 and data.count(b"\n") <= count and end - position < max_bytes:
                step = min(_CHUNK, position)
                position -= step
                fh.seek(position)
                data = fh.read(step) + data
    except OSError:  # missing, or a directory / unreadable (the run's damage report says which)
        return []
    lines = data.decode("utf-8", errors="replace").splitlines()
    if position > 0 and lines:
        lines = lines[1:]  # the first line may be cut in the middle
    return lines[-count:]


def last_json_line(path: Path) -> dict[str, Any] | None:
    """The last parseable JSON object of a JSONL file (a line being written is skipped)."""
    for line in reversed(tail_lines(path, 5)):
        try:
            value = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict):
            return value
    return None
