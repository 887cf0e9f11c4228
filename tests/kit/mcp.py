"""Small helpers shared by the end-to-end tests that drive the real server through a client."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mcp import Client

from mcp_rl.settings import Settings
from tests.conftest import make_env
from tests.kit.runs import TEST_HELD_OUT_LIMIT
from tests.kit.wait import WaitTimeout, wait_for_async

REPO = Path(__file__).resolve().parents[2]
# Where the slow tier keeps the environment families' interpreters: outside the checkout, so only
# a machine's first run pays for making them.
FAMILIES = Path(os.environ.get("MCP_RL_CI_FAMILIES", Path.home() / ".cache" / "mcp-rl-ci" / "families"))

# A run short enough for a 2-core CI machine: 2 steps of 2 groups of 4 answers, evaluated on
# TEST_HELD_OUT_LIMIT held-out items at both ends.
SHORT_RUN = {"total_steps": 2, "batch_size": 8, "group_size": 4, "held_out_limit": TEST_HELD_OUT_LIMIT}


async def ok(client: Client, tool: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
    """Call a tool that must succeed; return its structured result."""
    result = await client.call_tool(tool, args or {})
    assert not result.is_error, f"{tool}: {result.content[0].text}"
    return result.structured_content


def fixture_task(home: Path, model: Path, tmp_path: Path, fixture: Path) -> tuple[dict[str, str], Settings]:
    """A task file of tests/fixtures/tasks copied alone into an environments folder: the server's
    extra environment (the model, that folder, and PYTHONPATH so every child imports this
    checkout's mcp_rl.task) and the Settings the server reads from it."""
    envs = tmp_path / "envs"
    envs.mkdir()
    shutil.copy(fixture, envs / fixture.name)
    extra = {"MCP_RL_MODEL": str(model), "MCP_RL_ENV_PATHS": str(envs), "PYTHONPATH": str(REPO)}
    return extra, Settings.from_env(make_env(home, **extra))


async def run_to_end(
    client: Client, run_id: str, deadline_s: float, each: Callable[[], None] | None = None
) -> dict[str, Any]:
    """rl_check_status of `run_id` once a second until it ends or `deadline_s` passes (`each` runs
    at every poll); the last status."""
    status: dict[str, Any] = {}

    async def ended() -> bool:
        if each is not None:
            each()
        status.clear()
        status.update(await ok(client, "rl_check_status", {"run_id": run_id}))
        return status["status"] in {"completed", "failed", "stopped"}

    with contextlib.suppress(WaitTimeout):  # the caller asserts on the last status
        await wait_for_async(ended, deadline_s, f"run {run_id} to end", interval=1.0)
    return status


def build_family(family: str) -> Path:
    """A family's interpreter made by the project's own code (reused when made before); FAMILIES."""
    start = time.monotonic()
    out = subprocess.run(
        [sys.executable, "-m", "mcp_rl.environments.families", "build", family, "--deadline", "1500"],
        capture_output=True,
        text=True,
        env=dict(os.environ, MCP_RL_FAMILIES_DIR=str(FAMILIES)),
        cwd=Path(__file__).resolve().parents[2],
        timeout=1600,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    print(f"{family} interpreter ready in {time.monotonic() - start:.1f} s: {out.stdout.strip()}")
    return FAMILIES
