"""Where an export may be written: destinations that cannot hurt what the user has.

A destination is an absolute path (a relative one would land in the server's working folder,
`/` under some hosts), taken as written: `..` is collapsed but no link is followed, and a link
anywhere on the path is refused. It is refused when it is `/`, a home folder itself, the state
folder or anything that holds it, or inside the state folder's runs (a run's own `exports/`
folder, the default, excepted), so an export can never replace a run or the checkpoint it
exports. An existing folder is replaced only with `overwrite`, and only when an mcp-rl export
wrote it (its marker file says so), by building the new one beside it and renaming it in. One
destination is written by one export at a time (`hold`).
"""

from __future__ import annotations

import hashlib
import json
import os
import pwd
import stat
import time
from pathlib import Path
from typing import Any

from mcp_rl.errors import UserError
from mcp_rl.locking import lock_fd
from mcp_rl.paths import normal_path
from mcp_rl.processes import wait_until

# Written into every export folder: the proof that mcp-rl wrote it (and what it holds).
MARKER_FILE = ".mcp-rl-export.json"
EXPORTS_SUBDIR = "exports"  # runs/<id>/exports/: the default place, the one allowed inside runs/
MAX_PATH_CHARS = 4096  # PATH_MAX on Linux
MAX_NAME_BYTES = 255  # NAME_MAX
CLAIM_WAIT_S = 5.0  # how long a new export waits for the previous one's worker to exit


def _home_folders() -> set[Path]:
    # Every account's home folder (the server's user's included): no lookup of $HOME needed.
    return {normal_path(entry.pw_dir) for entry in pwd.getpwall() if entry.pw_dir.startswith("/")}


def _link_on(path: Path) -> Path | None:
    """The first link on `path` (itself or a parent), walking down from `/`; None if none."""
    current = Path(path.anchor)
    for part in path.parts[1:]:
        current = current / part
        try:
            mode = os.lstat(current).st_mode
        except FileNotFoundError:
            return None  # nothing exists below a missing folder
        except OSError as exc:
            raise UserError(f"dest: {current} cannot be inspected ({exc.strerror}); choose another dest") from None
        if stat.S_ISLNK(mode):
            return current
    return None


def normalise(dest: str) -> Path:
    """`dest` as an absolute path without `..` (links untouched), or a UserError saying why not."""
    if "\x00" in dest:
        raise UserError("dest contains a NUL byte: give a folder path without control characters")
    if len(dest) > MAX_PATH_CHARS:
        raise UserError(
            f"dest is {len(dest)} characters long; a path has at most {MAX_PATH_CHARS}: choose a shorter one"
        )
    if not dest.strip():
        raise UserError("dest is empty: give an absolute folder path, or leave dest out for the run's exports folder")
    long = [p for p in dest.split("/") if len(p.encode("utf-8", "surrogateescape")) > MAX_NAME_BYTES]
    if long:
        raise UserError(f"dest has a name of more than {MAX_NAME_BYTES} bytes ({long[0][:40]!r}...): shorten it")
    path = normal_path(dest)
    if not path.is_absolute():
        home = Path(pwd.getpwuid(os.getuid()).pw_dir)
        raise UserError(
            f"dest {dest[:200]!r} is relative (it would land in the server's working folder): give an absolute "
            f"path, e.g. {normal_path(home / dest)}"
        )
    return path


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def check_place(path: Path, *, state_dir: Path, runs_dir: Path, sources: list[Path]) -> None:
    """Refuse a destination that is, holds or lies inside what the user has (see the module)."""
    if path == Path(path.anchor):
        raise UserError("dest '/' is the whole file system: give a folder of its own, e.g. /home/you/my-model")
    if path in _home_folders():
        raise UserError(f"dest {path} is a home folder itself: give a folder inside it, e.g. {path / 'my-model'}")
    for mine in (state_dir, runs_dir):
        if _inside(mine, path):
            raise UserError(f"dest {path} holds mcp-rl's state folder {state_dir} (every run): choose another dest")
    for source in sources:
        if _inside(path, source) or _inside(source, path):
            raise UserError(f"dest {path} is or holds the checkpoint being exported ({source}): choose another dest")
    if _inside(path, runs_dir):
        parts = path.relative_to(runs_dir).parts
        if len(parts) < 3 or parts[1] != EXPORTS_SUBDIR:
            raise UserError(
                f"dest {path} is inside the runs folder {runs_dir} (a run's own files): choose a folder outside "
                f"it, or leave dest out for {runs_dir}/<run_id>/{EXPORTS_SUBDIR}/"
            )
    link = _link_on(path)
    if link is not None:
        raise UserError(
            f"dest {path} goes through a link ({link} -> {os.readlink(link)}): links are never followed; "
            f"give the real path, e.g. {Path(os.path.realpath(path))}"
        )


def read_marker(folder: Path) -> dict[str, Any] | None:
    """What an mcp-rl export folder holds (its marker), None if `folder` is not one."""
    marker = folder / MARKER_FILE
    try:
        if not stat.S_ISREG(os.lstat(marker).st_mode):
            return None
        data = json.loads(marker.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def write_marker(folder: Path, **fields: Any) -> None:
    (folder / MARKER_FILE).write_text(json.dumps(fields, indent=1), encoding="utf-8")


def check_existing(path: Path, overwrite: bool) -> None:
    """Refuse what is at `path` unless it may be replaced: nothing, an empty folder, or (with
    `overwrite`) a folder an mcp-rl export wrote. A link or a file is never replaced."""
    link = _link_on(path)
    if link is not None:
        raise UserError(f"dest {path} goes through a link ({link}): links are never followed; choose another dest")
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(mode):
        raise UserError(f"{path} exists and is not a folder: choose another dest")
    if not any(path.iterdir()):
        return
    if not overwrite:
        raise UserError(
            f"{path} exists: choose another dest, or pass overwrite=true to replace it (only a folder an mcp-rl "
            "export wrote is ever replaced)"
        )
    if read_marker(path) is None:
        raise UserError(
            f"{path} exists and was not written by an mcp-rl export (it has no {MARKER_FILE}): it is never "
            "replaced, even with overwrite=true; choose another dest"
        )


def hold(locks_dir: Path, path: Path) -> int:
    """Claim `path` for one export: an open descriptor holding its lock (hand it to the worker
    with `pass_fds`, then close yours; the claim ends when the worker exits). Raises UserError
    while another export holds it."""
    locks_dir.mkdir(parents=True, exist_ok=True)
    name = hashlib.sha256(str(path).encode("utf-8", "surrogateescape")).hexdigest()[:32]
    fd = os.open(locks_dir / f"{name}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    # A worker that has just written its last status may still be exiting: give it a moment.
    if not wait_until(lambda: lock_fd(fd, wait=False), time.monotonic() + CLAIM_WAIT_S, poll_s=0.05):
        os.close(fd)
        raise UserError(
            f"another export is writing to {path} right now: wait for it (rl_get_export_result), or choose another dest"
        ) from None
    return fd
