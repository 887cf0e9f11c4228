"""The tool catalog kept from an earlier start: `tools/list` answers from it before the surface
is registered, with exactly the bytes a registering start publishes; a stale, damaged or wrong
file is derived again and rewritten; the surface still registers (and its start-up work runs)
for a client that asks nothing else."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from mcp_rl.server import build_server, tool_catalog
from mcp_rl.server.rl_server import REGISTER_WITHIN_S
from mcp_rl.settings import Settings
from tests.kit.wait import wait_for_async

pytestmark = pytest.mark.anyio


def _settings(home: Path) -> Settings:
    return Settings.from_env({"MCP_RL_HOME": str(home)})


async def _tools(settings: Settings) -> list[dict[str, Any]]:
    async with Client(build_server(settings), mode="legacy") as client:
        return [t.model_dump(mode="json", by_alias=True) for t in (await client.list_tools()).tools]


async def test_a_kept_catalog_answers_before_registration_with_the_same_bytes(tmp_path: Path) -> None:
    settings = _settings(tmp_path / "home")
    path = tool_catalog.catalog_file(settings)
    derived = await _tools(settings)
    assert path.exists() and len(derived) >= 20
    written = path.stat().st_mtime_ns

    server = build_server(settings)
    kept = await server.list_tools()  # no lifespan, no request that needs the surface
    assert not server.surface_registered
    assert [t.model_dump(mode="json", by_alias=True) for t in kept] == derived

    reused = await _tools(settings)
    assert json.dumps(reused) == json.dumps(derived)  # byte for byte, key order included
    assert path.stat().st_mtime_ns == written  # the registered tools matched: nothing rewritten


async def test_calls_wait_for_the_surface_and_are_checked(tmp_path: Path) -> None:
    settings = _settings(tmp_path / "home")
    await _tools(settings)  # writes the catalog
    async with Client(build_server(settings), mode="legacy") as client:
        result = await client.call_tool("rl_list_runs", {"wait_for_previous": True})  # a host's own argument
        assert not result.is_error and "runs" in (result.structured_content or {})
        refused = await client.call_tool("rl_list_runs", {"run": "x"})
        assert refused.is_error and "rl_list_runs does not take run" in refused.content[0].text
        answer = await client.call_tool("rl_check_status", {"run_id": "nope1234"})
        assert not answer.is_error and (answer.structured_content or {}).get("found") is False


@pytest.mark.parametrize("content", ["{not json", json.dumps({"key": "another", "tools": []}), "[]"])
async def test_a_stale_or_damaged_catalog_is_derived_again(tmp_path: Path, content: str) -> None:
    reference = await _tools(_settings(tmp_path / "reference"))
    settings = _settings(tmp_path / "home")
    path = tool_catalog.catalog_file(settings)
    path.parent.mkdir(parents=True)
    path.write_text(content)
    assert await _tools(settings) == reference
    assert json.loads(path.read_text())["key"] == tool_catalog.code_key()


async def test_a_catalog_that_differs_from_the_registered_tools_is_rewritten(tmp_path: Path) -> None:
    settings = _settings(tmp_path / "home")
    reference = await _tools(settings)
    path = tool_catalog.catalog_file(settings)
    data = json.loads(path.read_text())
    data["tools"][0]["description"] = "not what the code says"
    path.write_text(json.dumps(data))
    async with Client(build_server(settings), mode="legacy") as client:
        first = (await client.list_tools()).tools  # from the file, as it is
        assert first[0].description == "not what the code says"
        await client.call_tool("rl_list_runs", {})  # registers; the published tools are the code's
        again = [t.model_dump(mode="json", by_alias=True) for t in (await client.list_tools()).tools]
    assert again == reference
    assert json.loads(path.read_text())["tools"][0]["description"] != "not what the code says"


async def test_the_surface_registers_for_a_client_that_asks_nothing_else(tmp_path: Path) -> None:
    settings = _settings(tmp_path / "home")
    await _tools(settings)
    server = build_server(settings)
    async with Client(server, mode="legacy") as client:
        await client.list_tools()

        async def registered() -> bool:
            return server.surface_registered

        await wait_for_async(registered, REGISTER_WITHIN_S + 30, "the surface to register", interval=0.05)
        assert server.surface_registered
