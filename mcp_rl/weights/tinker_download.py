"""Downloading a Tinker training checkpoint the way `tinker checkpoint download` does it (SDK
0.38, tinker/cli/commands/checkpoint.py): load it into a new training client, export it as
temporary external weights, fetch each file from its signed URL, delete the temporary export,
close the session. This starts a short Tinker session on the base model (it costs a little).

Every file lands inside the destination folder only: a name that is absolute, has `..`, an
empty or `.` part or a backslash is refused before anything is written, files are created
exclusively (never through an existing file or link), and sizes are bounded.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from mcp_rl.errors import UserError
from mcp_rl.settings import Settings

log = logging.getLogger(__name__)

EXPORT_NAME = "mcp-rl-export"
# The temporary export outlives the download (Tinker's minimum TTL), as the SDK's CLI does.
EXPORT_TTL_S = 3600
TIMEOUT_S = 600.0
MAX_FILE_BYTES = 32 * 1024**3
MAX_TOTAL_BYTES = 64 * 1024**3
CHUNK = 1 << 20


def safe_target(root: Path, name: str) -> Path:
    """Where file `name` of a download goes inside `root`; refuses anything that could escape."""
    parts = PurePosixPath(name).parts
    if (
        not name
        or "\\" in name
        or "\x00" in name
        or name.startswith("/")
        or not parts
        or any(p in ("", ".", "..") for p in name.split("/"))
    ):
        raise UserError(f"refused a checkpoint file named {name[:120]!r}: it would be written outside the destination")
    target = root.joinpath(*parts)
    resolved_root = root.resolve()
    if not target.resolve().is_relative_to(resolved_root):
        raise UserError(f"refused a checkpoint file named {name[:120]!r}: it would be written outside the destination")
    return target


def fetch(url: str, target: Path, limit: int) -> int:
    """One signed URL into a new file (never an existing one or a link); returns its bytes."""
    # httpx: imported only when a download happens
    import httpx

    target.parent.mkdir(parents=True, exist_ok=True)
    written = 0
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    with httpx.stream("GET", url, timeout=60.0, follow_redirects=True) as response:
        response.raise_for_status()
        declared = int(response.headers.get("content-length") or 0)
        if declared > limit:
            raise UserError(f"the checkpoint file {target.name} is {declared} bytes, over the {limit}-byte bound")
        fd = os.open(target, flags, 0o644)
        with os.fdopen(fd, "wb") as fh:
            for chunk in response.iter_bytes(CHUNK):
                written += len(chunk)
                if written > limit:
                    raise UserError(f"the checkpoint file {target.name} exceeds the {limit}-byte bound")
                fh.write(chunk)
    return written


def download_files(rest: Any, export_path: str, dest: Path, max_total: int = MAX_TOTAL_BYTES) -> int:
    """Every file of an external-weights checkpoint into `dest` (validated first)."""
    response = rest.get_external_weights_urls(export_path).result(timeout=TIMEOUT_S)
    if not response.urls:
        raise UserError(f"the Tinker export {export_path} holds no files")
    targets = {name: safe_target(dest, name) for name in response.urls}
    total = 0
    for name, target in sorted(targets.items()):
        total += fetch(response.urls[name], target, min(MAX_FILE_BYTES, max_total - total))
    return total


def download_checkpoint(settings: Settings, tinker_path: str, dest: Path, progress: Any) -> int:
    """The adapter of a training checkpoint (`tinker://<run>/weights/<name>`) into `dest`."""
    if "/sampler_weights/" in tinker_path:
        raise UserError("Tinker sampler weights cannot be downloaded: choose a step with a state checkpoint")
    if settings.tinker_api_key is None:
        raise UserError("downloading from Tinker needs TINKER_API_KEY in the server's environment")
    # tinker: imported only for a Tinker download
    import tinker

    key = settings.tinker_api_key.get_secret_value()
    service = tinker.ServiceClient(api_key=key, base_url=settings.tinker_base_url)
    rest = tinker.RestClient(api_key=key, base_url=settings.tinker_base_url)
    status: Literal["success", "errored"] = "errored"
    try:
        progress(f"starting a short Tinker session to export {tinker_path}")
        training = service.create_training_client_from_state(
            tinker_path, user_metadata={"created_by": "mcp-rl export"}
        ).result(timeout=TIMEOUT_S)
        export_path = (
            training.save_weights_external(EXPORT_NAME, ttl_seconds=EXPORT_TTL_S).result(timeout=TIMEOUT_S).path
        )
        try:
            progress("downloading the exported adapter")
            total = download_files(rest, export_path, dest)
        finally:
            try:
                rest.delete_checkpoint_from_tinker_path(export_path).result(timeout=60)
            except Exception as exc:  # it expires by itself within the hour
                log.warning("the temporary export %s was not deleted (%s); it expires in 1 h", export_path, exc)
        status = "success"
        return total
    finally:
        try:
            service.close(status).result(timeout=60)
        except Exception:  # the session times out on its own
            log.warning("the Tinker export session did not close cleanly", exc_info=True)
