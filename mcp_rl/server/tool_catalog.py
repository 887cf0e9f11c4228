"""The published tool list kept from an earlier start, so `tools/list` answers before the tool
modules are even imported (server/rl_server.py says why).

`<cache_dir>/tool-catalog.json` holds the tools exactly as `RlServer.list_tools` publishes them,
under a key made of the Python, pydantic, pydantic-core and MCP SDK versions and the size and
modification time of every module file of the mcp_rl package (the tools, their answer models
and the rules are all in it). Another key, a damaged file, or none: the start registers the
surface before it answers and writes the file again. A start that reads the file still checks it
against the registered tools once they are in, and rewrites it if they differ. What a client sees
is the same either way (a test compares the bytes).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sys
from pathlib import Path
from typing import Any

import mcp.server.mcpserver.server as sdk_server
import mcp.server.mcpserver.utilities.func_metadata as sdk_metadata
import pydantic
import pydantic_core
from mcp.types import Tool as MCPTool
from pydantic import ValidationError

import mcp_rl
from mcp_rl.atomic import write_text_atomic
from mcp_rl.settings import Settings

log = logging.getLogger(__name__)

FILE_NAME = "tool-catalog.json"
FORMAT = 1


def catalog_file(settings: Settings) -> Path:
    return settings.cache_dir / FILE_NAME


def code_key() -> str:
    """Changes whenever what the published tools are made from may have: the versions, the MCP
    SDK's files that derive and publish schemas, and every module file of mcp_rl."""
    parts = [str(FORMAT), sys.version, pydantic.VERSION, pydantic_core.__version__]
    parts += [_stamp(sdk_server.__file__), _stamp(sdk_metadata.__file__)]
    root = Path(mcp_rl.__file__).parent
    for path in sorted(_module_files(root)):
        parts.append(f"{path.relative_to(root)} {_stamp(str(path))}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def _module_files(folder: Path) -> list[Path]:
    found: list[Path] = []
    with os.scandir(folder) as entries:
        for entry in entries:
            if entry.is_dir(follow_symlinks=False) and entry.name != "__pycache__":
                found += _module_files(Path(entry.path))
            elif entry.name.endswith(".py"):
                found.append(Path(entry.path))
    return found


def _stamp(path: str | None) -> str:
    if not path:
        return "-"
    try:
        st = os.stat(path)
    except OSError:
        return "?"
    return f"{st.st_size}:{st.st_mtime_ns}"


def read(settings: Settings) -> list[MCPTool] | None:
    """The kept tools, or None (no file, damaged, or made by other code)."""
    try:
        data = json.loads(catalog_file(settings).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("tools"), list) or data.get("key") != code_key():
        return None
    try:
        return [MCPTool.model_validate(tool) for tool in data["tools"]]
    except ValidationError:
        return None


def write(settings: Settings, tools: list[MCPTool]) -> None:
    """Keep `tools` for the next start (a read-only state directory: derived again next time)."""
    data: dict[str, Any] = {"key": code_key(), "tools": [t.model_dump(mode="json", by_alias=True) for t in tools]}
    try:
        catalog_file(settings).parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(catalog_file(settings), json.dumps(data))
    except OSError as exc:
        log.debug("could not keep the tool catalog: %r", exc)
