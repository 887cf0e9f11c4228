"""The hosts' own clients for the slow tier: Claude Code, Gemini CLI, Codex and opencode from npm,
pinned in tests/hosts/clients/package.json and installed by scripts/install_host_clients into a
cache outside the checkout (~/.cache/mcp-rl-ci/hosts, or MCP_RL_HOST_CLIENTS), once per pin set;
and the README's own configuration snippets for them, so the README cannot drift from what is
tested. When a client cannot be installed, its test skips on a developer's machine and fails in
CI (CI=true): a CI run must not go green without driving the hosts."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any, NoReturn

import pytest

CHECKOUT = Path(__file__).resolve().parents[2]
INSTALL_TIMEOUT_S = 900
README_PATH = "/path/to/mcp-rl"


def unavailable(reason: str) -> NoReturn:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{reason} (CI=true: the host clients must be installable in CI)")
    pytest.skip(reason)


def node_modules() -> Path:
    """node_modules/ holding the pinned host clients (installed on first use)."""
    try:
        done = subprocess.run(
            [str(CHECKOUT / "scripts" / "install_host_clients")],
            capture_output=True,
            text=True,
            timeout=INSTALL_TIMEOUT_S,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        unavailable(f"installing the host clients failed: {exc!r}")
    if done.returncode != 0:
        unavailable(f"installing the host clients failed: {done.stderr.strip()[-800:]}")
    folder = Path(done.stdout.strip().splitlines()[-1]) / "node_modules"
    if not (folder / ".bin").is_dir():
        unavailable(f"no {folder / '.bin'} after installing the host clients")
    return folder


def mcp_rl_command() -> str:
    """The checkout's `mcp-rl` (a git worktree shares the main checkout's venv: this Python's)."""
    own = CHECKOUT / ".venv" / "bin" / "mcp-rl"
    return str(own if own.exists() else Path(sys.executable).parent / "mcp-rl")


def readme_block(host: str, lang: str) -> str:
    """The first ```lang block of the README's section for `host` (`**Host**` to the next block),
    with the checkout's `mcp-rl` filled in for the README's placeholder path."""
    readme = (CHECKOUT / "README.md").read_text()
    section = readme[readme.index(f"**{host}**") :]
    block = re.search(rf"```{lang}\n(.*?)```", section, re.S)
    assert block is not None, f"the README's {host} section has no {lang} block"
    return block.group(1).replace(f"{README_PATH}/.venv/bin/mcp-rl", mcp_rl_command())


def readme_json(host: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(readme_block(host, "json"))
    return data
