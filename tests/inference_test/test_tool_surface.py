"""The rl_test_inference surface without running models: schema, annotations, refusals, resources."""

from __future__ import annotations

from pathlib import Path

import pytest
from mcp import Client, MCPError

from mcp_rl.server import build_server
from mcp_rl.settings import Settings
from tests.conftest import make_env

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["auto", "legacy"])
def mode(request) -> str:
    return request.param


async def test_schema_keeps_the_original_parameters_and_is_honest(home: Path, mode: str) -> None:
    async with Client(build_server(Settings.from_env(make_env(home))), mode=mode) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        templates = {t.uri_template for t in (await client.list_resource_templates()).resource_templates}
    tool = tools["rl_test_inference"]
    props = tool.input_schema["properties"]
    assert (
        props["num_steps"]["default"] == 3
        and props["num_steps"]["minimum"] == 1
        and props["num_steps"]["maximum"] == 20
    )
    assert props["group_size"]["default"] == 16 and props["group_size"]["maximum"] == 64
    assert props["models"]["default"] is None
    assert "required" not in tool.input_schema
    assert tool.annotations.read_only_hint is False and tool.annotations.destructive_hint is False
    assert tool.annotations.idempotent_hint is False and tool.annotations.open_world_hint is True
    assert {"summary", "models_tested", "test_id", "state"} <= set(tool.output_schema["properties"])
    assert "BEFORE training" in tool.description
    assert {
        "rl://tests/{test_id}",
        "rl://tests/{test_id}/{model}",
        "rl://tests/{test_id}/{model}/log{?tail}",
    } <= templates


async def test_refusals_say_what_to_do(home: Path, mode: str) -> None:
    async with Client(build_server(Settings.from_env(make_env(home))), mode=mode) as client:
        nothing_selected = await client.call_tool("rl_test_inference", {"num_steps": 1, "group_size": 2})
        out_of_range = await client.call_tool("rl_test_inference", {"num_steps": 0})
        with pytest.raises(MCPError) as unknown:
            await client.read_resource("rl://tests/20990101-000000-abcdef")
    # Nothing selected is an answer (server/exploring.py); a bad value is an error.
    assert not nothing_selected.is_error and "rl_select_environment" in nothing_selected.content[0].text
    assert nothing_selected.structured_content["kind"] == "environment"
    assert out_of_range.is_error and "num_steps" in out_of_range.content[0].text
    assert unknown.value.error.code == -32602 and "Unknown test_id" in unknown.value.error.message
