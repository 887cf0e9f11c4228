"""The yes before paid work, through a real MCP client: rl_get_current_config states the
estimate, a Tinker start above the threshold without a cap is refused with the estimate and
the call that accepts it (nothing started), a client that declares elicitation asks its person
(decline: nothing started; accept: the start goes on), and a cap is the accepted way round."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from mcp import Client, types

from mcp_rl.server import build_server
from mcp_rl.settings import Settings
from tests.conftest import FIXTURES, make_env

pytestmark = pytest.mark.anyio
ENV_PATHS = str(FIXTURES / "envs" / "good")


def server(home: Path, **extra: str):
    env = make_env(home, MCP_RL_ENV_PATHS=ENV_PATHS, TINKER_API_KEY="tml-test-key", **extra)
    return build_server(Settings.from_env(env))


def answering(action: str, asked: list[str]):
    async def callback(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params.message)
        content = {"start": True} if action == "accept" else None
        return types.ElicitResult(action=action, content=content)

    return callback


def runs(home: Path) -> list[Path]:
    folder = home / "runs"
    return sorted(folder.iterdir()) if folder.is_dir() else []


async def select(client: Client) -> dict[str, Any]:
    selected = await client.call_tool("rl_select_environment", {"name": "counting"})
    assert not selected.is_error, selected.content
    current = await client.call_tool("rl_get_current_config", {})
    assert not current.is_error, current.content
    return current.structured_content


async def test_a_paid_start_above_the_threshold_without_a_cap_is_refused_with_the_estimate(home: Path) -> None:
    async with Client(server(home)) as client:
        current = await select(client)
        cost = current["estimated_cost"]
        assert cost["label"] == "estimated" and not cost["free"]
        assert cost["drivers"]["model"] == "Qwen/Qwen3-8B" and cost["drivers"]["steps"] == 2500
        assert cost["run_usd"]["low"] < cost["run_usd"]["expected"] < cost["run_usd"]["high"]
        assert cost["run_usd"]["low"] > 5  # the defaults are well above the $5 threshold
        result = await client.call_tool("rl_start_training", {})
        text = result.content[0].text
        assert result.is_error
        assert 'rl_edit_config("max_cost_usd", ' in text and "Estimated cost: $" in text and "Nothing was" in text
        assert runs(home) == []


async def test_a_person_asked_through_elicitation_can_decline_or_accept(home: Path) -> None:
    # Today's hosts (2025-11-25) take a request from the server within a tool call; on
    # 2026-07-28 there is no back channel for ctx.elicit, so the start is refused as above.
    asked: list[str] = []
    async with Client(server(home), elicitation_callback=answering("decline", asked), mode="legacy") as client:
        await select(client)
        result = await client.call_tool("rl_start_training", {})
        assert result.is_error and "declined" in result.content[0].text
        assert len(asked) == 1 and "Estimated cost: $" in asked[0] and "Qwen/Qwen3-8B" in asked[0]
        assert runs(home) == []
    async with Client(server(home), elicitation_callback=answering("accept", asked), mode="legacy") as client:
        # A stale expected_revision stops the start right after the gate: the refusal is the
        # revision's, so the yes let it through, and still nothing is started.
        result = await client.call_tool("rl_start_training", {"expected_revision": "stale"})
        assert result.structured_content["started"] is False
        assert "config changed since revision 'stale'" in result.content[0].text
        assert len(asked) == 2
        assert runs(home) == []


async def test_a_cap_is_what_accepts_the_estimate_and_bad_caps_are_refused(home: Path) -> None:
    asked: list[str] = []
    async with Client(server(home), elicitation_callback=answering("decline", asked)) as client:
        await select(client)
        for bad in ("nan", "inf", "-inf", -1, 0, 1e7, "lots"):
            edit = await client.call_tool("rl_edit_config", {"field": "max_cost_usd", "value": bad})
            assert edit.structured_content["applied"] is False, bad  # refused: an answer, not an error
        edit = await client.call_tool("rl_edit_config", {"field": "max_cost_usd", "value": 2.5})
        assert not edit.is_error, edit.content
        current = (await client.call_tool("rl_get_current_config", {})).structured_content
        assert current["estimated_cost"]["max_cost_usd"] == 2.5
        result = await client.call_tool("rl_start_training", {"expected_revision": "stale"})
        assert result.structured_content["started"] is False
        assert "config changed since revision 'stale'" in result.content[0].text
        assert asked == []  # a capped start is never asked about
        # A cap below even the cheapest step is refused with the estimate, not overspent once.
        edit = await client.call_tool("rl_edit_config", {"field": "max_cost_usd", "value": 1e-6})
        assert not edit.is_error, edit.content
        result = await client.call_tool("rl_start_training", {})
        assert result.is_error and "less than one step" in result.content[0].text
        assert 'rl_edit_config("max_cost_usd", ' in result.content[0].text
        assert runs(home) == [] and asked == []


async def test_a_local_run_is_free_and_never_asked_about(home: Path) -> None:
    asked: list[str] = []
    async with Client(server(home), elicitation_callback=answering("decline", asked)) as client:
        await select(client)
        edit = await client.call_tool("rl_edit_config", {"field": "backend", "value": "local"})
        assert not edit.is_error, edit.content
        cost = (await client.call_tool("rl_get_current_config", {})).structured_content["estimated_cost"]
        assert cost["free"] and cost["run_usd"]["high"] == 0.0 and cost["summary"].startswith("$0")
        result = await client.call_tool("rl_start_training", {"expected_revision": "stale"})
        assert "config changed since revision 'stale'" in result.content[0].text
        assert asked == []
