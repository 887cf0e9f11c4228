"""Output schemas kept from an earlier start: a start that reuses them shows clients exactly what
a start that derives them shows, answers are still validated, and a stale or damaged file is
derived again and rewritten."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from mcp_rl.server import build_server, schema_cache
from mcp_rl.settings import Settings

pytestmark = pytest.mark.anyio


def _settings(home: Path) -> Settings:
    return Settings.from_env({"MCP_RL_HOME": str(home)})


async def _tools(settings: Settings) -> list[dict[str, Any]]:
    async with Client(build_server(settings), mode="legacy") as client:
        return [t.model_dump(mode="json", by_alias=True) for t in (await client.list_tools()).tools]


def _metadata(settings: Settings) -> dict[str, tuple[Any, Any, bool]]:
    server = build_server(settings)
    return {
        t.name: (t.fn_metadata.output_model, t.fn_metadata.output_schema, t.fn_metadata.wrap_output)
        for t in server._tool_manager.list_tools()
    }


async def test_kept_schemas_are_what_deriving_gives(tmp_path: Path) -> None:
    settings = _settings(tmp_path / "home")
    path = schema_cache.cache_file(settings)
    derived = await _tools(settings)
    assert path.exists()
    kept = json.loads(path.read_text())["tools"]
    with_output = [t["name"] for t in derived if t.get("outputSchema")]
    assert sorted(kept) == sorted(with_output) and len(kept) >= 20
    written = path.stat().st_mtime_ns

    reused = await _tools(settings)
    assert json.dumps(reused) == json.dumps(derived)  # byte for byte, key order included
    assert path.stat().st_mtime_ns == written  # nothing derived, nothing rewritten

    fresh = _settings(tmp_path / "other")
    assert _metadata(settings) == _metadata(fresh)  # same models, schemas, wrapping on the tools


async def test_answers_are_still_validated_with_kept_schemas(tmp_path: Path) -> None:
    settings = _settings(tmp_path / "home")
    await _tools(settings)  # writes the file
    async with Client(build_server(settings), mode="legacy") as client:
        result = await client.call_tool("rl_list_runs", {})
    assert not result.is_error
    assert isinstance(result.structured_content, dict) and "runs" in result.structured_content


@pytest.mark.parametrize("content", ["{not json", json.dumps({"key": "another", "tools": {}}), "[]"])
async def test_stale_or_damaged_file_is_derived_again(tmp_path: Path, content: str) -> None:
    reference = await _tools(_settings(tmp_path / "reference"))
    settings = _settings(tmp_path / "home")
    path = schema_cache.cache_file(settings)
    path.parent.mkdir(parents=True)
    path.write_text(content)
    assert await _tools(settings) == reference
    assert json.loads(path.read_text())["key"] == schema_cache.code_key()


async def test_a_kept_schema_naming_a_missing_model_is_derived(tmp_path: Path) -> None:
    settings = _settings(tmp_path / "home")
    reference = await _tools(settings)
    path = schema_cache.cache_file(settings)
    data = json.loads(path.read_text())
    data["tools"]["rl_list_runs"]["model"] = "mcp_rl.nowhere:Gone"
    path.write_text(json.dumps(data))
    assert await _tools(settings) == reference
    assert json.loads(path.read_text())["tools"]["rl_list_runs"]["model"] == "mcp_rl.server.training_tools:RunPage"
