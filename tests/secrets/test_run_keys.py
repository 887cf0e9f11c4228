"""A real run whose environment raises with the server's keys in its message (issue 43, case 1):
the keys it names reach it, and none comes back out through rl_check_status, rl_read_log,
trainer_status.json, state.db, supervisor.log or any other file under MCP_RL_HOME.

The server runs as a stdio subprocess with fake keys in its environment (W&B disabled, the local
backend: nothing paid is called). Slow tier: a real run of the local model.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from mcp import Client

from tests.conftest import REPO, stdio_params
from tests.kit.mcp import SHORT_RUN, ok
from tests.secrets.test_validation_keys import COMMON, KEYS, found_in
from tests.supervisor.test_e2e_training import _stop_runs_left_by_a_failing_test

pytestmark = [pytest.mark.anyio, pytest.mark.slow]
__all__ = ["_stop_runs_left_by_a_failing_test"]

FAIL_WITHIN_S = 400.0

ENV = (
    COMMON
    + '''
from typing import Any

from atroposlib.envs.base import BaseEnv

from mcp_rl.environments.bundled.arithmetic import ArithmeticEnv


class LeakingEnv(ArithmeticEnv, BaseEnv):
    """Raises with every key it can see, in every form, on every item."""

    name = "leaking"
    env_vars = ("TINKER_API_KEY", "OPENROUTER_API_KEY", "WANDB_API_KEY", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")

    async def collect_trajectories(self, item: dict[str, Any]) -> Any:
        print("printed: " + leaked(), flush=True)
        raise RuntimeError("score failed: " + leaked())
'''
)


async def test_a_run_whose_environment_raises_with_the_keys_leaks_none(home: Path, tmp_path: Path) -> None:
    envs = tmp_path / "envs"
    envs.mkdir()
    (envs / "leaking_env.py").write_text(ENV, encoding="utf-8")
    server_env = {**KEYS, "WANDB_MODE": "disabled", "MCP_RL_ENV_PATHS": str(envs), "PYTHONPATH": str(REPO)}
    answers: list[str] = []
    async with Client(stdio_params(home, **server_env), read_timeout_seconds=120) as client:

        async def call(tool: str, args: dict) -> dict:
            result = await client.call_tool(tool, args)
            answers.append(
                json.dumps(result.structured_content) + "".join(getattr(c, "text", "") for c in result.content)
            )
            assert not result.is_error, result.content
            return result.structured_content

        await call("rl_select_environment", {"name": "leaking"})
        for field, value in {**SHORT_RUN, "backend": "local"}.items():
            await ok(client, "rl_edit_config", {"field": field, "value": value})
        run_id = (await call("rl_start_training", {"force": True}))["run_id"]
        started = time.monotonic()
        status: dict = {}
        while time.monotonic() - started < FAIL_WITHIN_S:
            waited = await call("rl_wait_for_run", {"run_id": run_id, "timeout_s": 30})
            status = waited["status"]
            if status["status"] in ("failed", "completed", "stopped"):
                break
        assert status["status"] == "failed", status
        full = await call("rl_check_status", {"run_id": run_id})
        for process in ("env", "trainer", "supervisor", "api"):
            await call("rl_read_log", {"run_id": run_id, "process": process})
        await call("rl_get_results", {"run_id": run_id})

    # The environment had the keys (it named them) and raised with them: the cause says so, redacted.
    assert "[redacted TINKER_API_KEY]" in full["cause"] + json.dumps(full), full
    for text in answers:
        assert found_in(text) == [], found_in(text)
    files = [p for p in home.rglob("*") if p.is_file()]
    names = {p.name for p in files}
    assert {"state.db", "trainer_status.json", "supervisor.log", "env.log"} <= names, sorted(names)
    leaks = {str(p.relative_to(home)): found_in(p.read_bytes().decode("utf-8", "replace")) for p in files}
    assert {path: labels for path, labels in leaks.items() if labels} == {}
