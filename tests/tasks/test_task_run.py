"""A task written against mcp_rl.task alone trains like a bundled environment, through a real
stdio client: listed as a task, selected, run on the local backend, and evaluated on its
held-out items at step 0 and at the end (the same figures as arithmetic)."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import anyio
import pytest
from mcp import Client

from mcp_rl.settings import Settings
from mcp_rl.supervisor import service
from tests.conftest import make_env, stdio_params
from tests.mcp_helpers import SHORT_RUN, ok

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
TASK = Path(__file__).resolve().parent.parent / "fixtures" / "tasks" / "larger_number.py"
RUN_DEADLINE_S = 900.0


async def test_a_task_trains_and_is_evaluated_on_its_held_out_items(
    home: Path, default_model: Path, tmp_path: Path
) -> None:
    envs = tmp_path / "envs"
    envs.mkdir()
    shutil.copy(TASK, envs / TASK.name)
    # PYTHONPATH: every child (environment, trainer) imports this checkout's mcp_rl.task
    extra = {"MCP_RL_MODEL": str(default_model), "MCP_RL_ENV_PATHS": str(envs), "PYTHONPATH": str(REPO)}
    settings = Settings.from_env(make_env(home, **extra))
    run_id = ""
    try:
        async with Client(stdio_params(home, **extra)) as client:
            listed = await ok(client, "rl_list_environments")
            assert "larger_number" in str(listed)
            await ok(client, "rl_select_environment", {"name": "larger_number"})
            for name, value in SHORT_RUN.items():
                await ok(client, "rl_edit_config", {"field": name, "value": value})
            run_id = (await ok(client, "rl_start_training"))["run_id"]
            end = time.monotonic() + RUN_DEADLINE_S
            status: dict = {}
            while time.monotonic() < end:
                status = await ok(client, "rl_check_status", {"run_id": run_id})
                if status["status"] in ("completed", "failed", "stopped"):
                    break
                await anyio.sleep(1.0)
            assert status["status"] == "completed", status
            held = status["held_out"]
            assert held["n"] == 200 and held["base_step"] == 0 and held["step"] == 2, held
            assert held["p_value"] is not None and held["wins"] is not None and held["losses"] is not None
            assert "McNemar" in held["test"]
            results = await ok(client, "rl_get_results", {"run_id": run_id})
            assert results["held_out"]["n"] == 200
    finally:
        record = service.registry_for(settings).get_run(run_id) if run_id else None
        if record is not None and record.active:
            service.stop_run(settings, run_id)
