"""rl_test_inference on a GEM id: whole episodes played by the local model, success rate reported.

Real parts only: the stdio MCP server, the inference-test worker, the project's local model
server (an OpenAI-type endpoint) and GemEnv in Atropos process mode.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from mcp import Client

from tests.conftest import stdio_params
from tests.kit.smoke_tests import read_until_done

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

EASY = "game:GuessTheNumber-v0-easy"
STEPS, GROUP = 1, 3


async def test_gem_episodes_smoke_tested_against_the_local_model(home: Path) -> None:
    async with Client(stdio_params(home)) as client:
        assert not (await client.call_tool("rl_select_environment", {"name": EASY})).is_error
        for field, value in {"max_tokens_per_turn": 4, "num_envs": 3}.items():
            assert not (await client.call_tool("rl_edit_config", {"field": field, "value": value})).is_error
        answer = await client.call_tool(
            "rl_test_inference", {"num_steps": STEPS, "group_size": GROUP, "models": ["local"]}
        )
        assert not answer.is_error, answer.content
        result = answer.structured_content
        if result["state"] == "running":
            result = await read_until_done(client, result["resource"], timeout_s=900)
    assert result["state"] == "completed", result["message"]
    local = result["models_tested"][0]
    assert local["state"] == "succeeded", (local.get("error"), local.get("log_tail"))
    # Each episode asks once per turn: the budget allows several turns an episode, and held.
    usage = local["usage"]
    assert usage["request_budget"] >= STEPS * GROUP * 4 and usage["requests"] <= usage["request_budget"]
    # One completion per episode, scored 1 (won) or 0: accuracy is the episode success rate.
    scores = [s for step in local["steps"] for s in step["scores"]]
    assert len(scores) == STEPS * GROUP and set(scores) <= {0.0, 1.0}
    assert local["accuracy"] == round(sum(scores) / len(scores), 4)
    for sample in local["samples"]:
        assert "guess" in sample["prompt"].lower() and "\\boxed{" in sample["completion"]
