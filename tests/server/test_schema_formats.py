"""Every tool's input and output schema, as a client lists it, uses only JSON Schema's own
`format` values: Claude Code, opencode and Gemini CLI print `unknown format "path" ignored` for
any other (the slow tier runs Claude Code itself)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from mcp_rl.server import build_server
from mcp_rl.server.schema_formats import STANDARD_FORMATS, standard_formats
from mcp_rl.settings import Settings
from tests.conftest import make_env

pytestmark = pytest.mark.anyio


def formats(schema: Any, where: str = "#") -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    if isinstance(schema, dict):
        if isinstance(schema.get("format"), str):
            found.append((where, schema["format"]))
        for key, value in schema.items():
            found += formats(value, f"{where}/{key}")
    elif isinstance(schema, list):
        for i, value in enumerate(schema):
            found += formats(value, f"{where}/{i}")
    return found


async def test_every_tool_schema_has_only_standard_formats(home: Path) -> None:
    async with Client(build_server(Settings.from_env(make_env(home)))) as client:
        tools = (await client.list_tools()).tools
    assert tools
    bad = [
        (tool.name, side, where, fmt)
        for tool in tools
        for side, schema in (("input", tool.input_schema), ("output", tool.output_schema))
        for where, fmt in formats(schema)
        if fmt not in STANDARD_FORMATS
    ]
    assert not bad, bad
    # The Path fields pydantic marked are still described as paths.
    listing = next(t for t in tools if t.name == "rl_list_environments").output_schema
    assert "file system path" in str(listing), listing


def test_a_path_format_becomes_a_described_string_and_a_parameter_named_format_stays() -> None:
    schema = {
        "properties": {
            "file_path": {"type": "string", "format": "path", "title": "File Path"},
            "when": {"type": "string", "format": "date-time"},
            "format": {"type": "string", "enum": ["lora", "merged"]},
        }
    }
    out = standard_formats(schema)
    assert out["properties"]["file_path"] == {
        "type": "string",
        "title": "File Path",
        "description": "A file system path.",
    }
    assert out["properties"]["when"]["format"] == "date-time"
    assert out["properties"]["format"] == schema["properties"]["format"]
    assert schema["properties"]["file_path"]["format"] == "path"  # the input is not changed
