"""Where the state directory is: the one rule, with the standard library only.

`Settings` takes its `home` from here, and so does `mcp-rl serve`'s first answer, which is sent
before pydantic or the MCP SDK is loaded (mcp_rl/first_answer.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

DEFAULT_HOME = ".mcp-rl"  # under the user's home folder
CACHE = "cache"  # derived files, rebuilt when missing (tool catalog, first answer, scans)


def home_dir(env: Mapping[str, str]) -> Path:
    """The state directory: MCP_RL_HOME, default ~/.mcp-rl."""
    return Path(env.get("MCP_RL_HOME") or Path.home() / DEFAULT_HOME).expanduser()


def cache_dir(home: Path) -> Path:
    return home / CACHE
