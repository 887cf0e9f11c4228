"""LIVE: one cheap OpenRouter model, one step, a group of 2 (`pytest -m live`; needs
OPENROUTER_API_KEY, costs a fraction of a cent). It succeeds, or fails with a readable cause."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mcp_rl.config.environment_service import EnvironmentService
from mcp_rl.inference_test import service
from mcp_rl.settings import Settings
from tests.kit.smoke_tests import ENV_NAME

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.live,
    pytest.mark.timeout(300),
    pytest.mark.skipif(not os.environ.get("OPENROUTER_API_KEY"), reason="needs OPENROUTER_API_KEY"),
]

CHEAP_MODEL = "qwen/qwen3-8b"


async def test_one_cheap_model_one_step_group_of_two(home: Path, model_dir: Path) -> None:
    settings = Settings.from_env({**os.environ, "MCP_RL_HOME": str(home), "MCP_RL_MODEL": str(model_dir)})
    environments = EnvironmentService(settings)
    environments.select(ENV_NAME)
    env_ref, env_config = service.session_environment(environments)
    started = service.start_test(settings, env_ref, env_config, num_steps=1, group_size=2, models=[CHEAP_MODEL])
    done = await service.wait_for_test(settings, started.test_id, 240)
    (model,) = done.models_tested
    assert done.state == "completed", done.message
    assert model.usage is not None and model.usage.requests <= model.usage.request_budget
    if model.state != "succeeded":
        # A readable cause: one line with the fix, not an exit code.
        assert model.error and "\n" not in model.error and "Fix:" in model.error, model.error
        pytest.fail(f"{CHEAP_MODEL}: {model.error}")
    assert model.total_completions == 2 and model.usage.total_tokens > 0
    assert model.usage.cost_usd is not None
