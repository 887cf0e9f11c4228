"""Every tool's input schema (as tools/list sends it) is accepted by Gemini's function
declarations and by OpenAI's non-strict function calling, checked against written-down rules.

The rules, from the providers' documentation of function declarations:

Gemini (FunctionDeclaration: `parameters` is an OpenAPI 3.0 `Schema` subset; Gemini CLI sends an
MCP tool's schema as `parametersJsonSchema`, which takes JSON Schema):
  G1 a function name starts with a letter or underscore, holds only a-z A-Z 0-9 _ . : -, and is
     at most 64 characters, here with the longest host prefix added (Hermes' `mcp__rl__`,
     Gemini CLI's `mcp_rl_`), as the host declares it to the model;
  G2 parameter names start with a letter or underscore and hold only a-z A-Z 0-9 _ (at most 64);
  G3 every schema node (a property, an array's items, a member of anyOf) has a `type` naming one
     JSON type as a string (never a list of types), or is an `anyOf` of such nodes;
  G4 only keywords of Gemini's Schema are used (type, format, title, description, nullable, enum,
     items, properties, required, anyOf, default, example, minimum, maximum, minItems, maxItems,
     minLength, maxLength, pattern, minProperties, maxProperties, propertyOrdering), plus
     `additionalProperties: false` on the parameters object itself; in particular no `$ref` or
     `$defs` (a reference cycle is refused outright), oneOf, allOf, not, const, and no numeric
     exclusiveMinimum/exclusiveMaximum (booleans in OpenAPI 3.0);
  G5 `enum` only on strings; an object below the top level lists its `properties`.
OpenAI (non-strict function calling; `parameters` is a JSON Schema object):
  O1 a function name matches ^[a-zA-Z0-9_-]{1,64}$ (with the host prefix, as in G1);
  O2 `parameters` is {"type": "object", "properties": {...}}, `required` names only properties;
  O3 an array schema has `items` (OpenAI refuses "array schema missing items" even non-strict).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from mcp_rl.server import build_server
from mcp_rl.settings import Settings
from tests.conftest import FIXTURES, make_env

pytestmark = pytest.mark.anyio

JSON_TYPES = {"string", "number", "integer", "boolean", "array", "object", "null"}
GEMINI_KEYWORDS = {
    "type",
    "format",
    "title",
    "description",
    "nullable",
    "enum",
    "items",
    "properties",
    "required",
    "anyOf",
    "default",
    "example",
    "minimum",
    "maximum",
    "minItems",
    "maxItems",
    "minLength",
    "maxLength",
    "pattern",
    "minProperties",
    "maxProperties",
    "propertyOrdering",
}
HOST_PREFIXES = ("mcp__rl__", "mcp_rl_")
GEMINI_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.:-]*$")
OPENAI_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
PARAM_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")


def schema_problems(node: Any, where: str, top: bool = False) -> list[str]:
    """Every way `node` breaks G3-G5 and O3, in words (empty: accepted)."""
    if not isinstance(node, dict):
        return [f"{where}: not a schema object"]
    problems = []
    for key, value in node.items():
        if key == "additionalProperties" and top and value is False:
            continue
        if key not in GEMINI_KEYWORDS:
            problems.append(f"{where}: keyword {key!r} is not in Gemini's schema")
    kind = node.get("type")
    if "anyOf" in node:
        members = node["anyOf"]
        if not isinstance(members, list) or not members:
            problems.append(f"{where}: anyOf is not a non-empty list")
        else:
            for i, member in enumerate(members):
                problems += schema_problems(member, f"{where}.anyOf[{i}]")
    elif not isinstance(kind, str) or kind not in JSON_TYPES:
        problems.append(f"{where}: no single JSON type (type={kind!r})")
    if "enum" in node and kind != "string":
        problems.append(f"{where}: enum on a {kind!r} (Gemini takes enums of strings)")
    if kind == "array":
        if "items" not in node:
            problems.append(f"{where}: array without items")
        else:
            problems += schema_problems(node["items"], f"{where}[]")
    if kind == "object":
        props = node.get("properties")
        if not top and not props:
            problems.append(f"{where}: object without properties")
        for name, sub in (props or {}).items():
            if not PARAM_NAME.match(name):
                problems.append(f"{where}.{name}: parameter name Gemini refuses")
            problems += schema_problems(sub, f"{where}.{name}")
        missing = set(node.get("required", [])) - set(props or {})
        if missing:
            problems.append(f"{where}: required names unknown properties {sorted(missing)}")
    return problems


def tool_problems(name: str, schema: dict[str, Any]) -> list[str]:
    problems = []
    for prefix in HOST_PREFIXES:
        full = prefix + name
        if not GEMINI_NAME.match(full) or len(full) > 64:
            problems.append(f"{full}: not a Gemini function name (G1)")
        if not OPENAI_NAME.match(full):
            problems.append(f"{full}: not an OpenAI function name (O1)")
    if schema.get("type") != "object" or not isinstance(schema.get("properties", {}), dict):
        problems.append(f"{name}: parameters are not an object with properties (O2)")
    return problems + schema_problems(schema, name, top=True)


def test_the_rules_catch_what_the_providers_refuse() -> None:
    """The checker fails schemas that break each rule (so a pass means something)."""
    bad = {
        "type": "object",
        "properties": {
            "untyped": {"description": "any value"},
            "listed": {"type": ["string", "null"]},
            "ref": {"$ref": "#/$defs/X"},
            "bare_list": {"type": "array"},
            "number_enum": {"type": "integer", "enum": [1, 2]},
            "open": {"type": "object"},
            "excl": {"type": "number", "exclusiveMinimum": 0},
            "bad-name": {"type": "string"},
        },
        "$defs": {"X": {"type": "string"}},
    }
    problems = "\n".join(tool_problems("x" * 60, bad))
    for expected in (
        "untyped: no single JSON type",
        "listed: no single JSON type",
        "ref: keyword '$ref'",
        "bare_list: array without items",
        "number_enum: enum on a 'integer'",
        "open: object without properties",
        "excl: keyword 'exclusiveMinimum'",
        "bad-name: parameter name",
        "keyword '$defs'",
        "not a Gemini function name",
        "not an OpenAI function name",
    ):
        assert expected in problems, expected


async def test_every_tool_schema_is_accepted_by_gemini_and_openai(home: Path) -> None:
    settings = Settings.from_env(make_env(home, MCP_RL_ENV_PATHS=str(FIXTURES / "envs" / "good")))
    async with Client(build_server(settings)) as client:
        tools = (await client.list_tools()).tools
    assert len(tools) >= 15
    problems = [p for tool in tools for p in tool_problems(tool.name, tool.input_schema)]
    assert problems == []
    edit = next(t for t in tools if t.name == "rl_edit_config").input_schema["properties"]["value"]
    assert {m["type"] for m in edit["anyOf"]} == {"string", "integer", "number", "boolean", "array", "null"}


async def test_edit_config_value_takes_each_type_of_the_union(home: Path) -> None:
    settings = Settings.from_env(make_env(home, MCP_RL_ENV_PATHS=str(FIXTURES / "envs" / "good")))
    async with Client(build_server(settings)) as client:
        await client.call_tool("rl_select_environment", {"name": "counting"})
        as_int = await client.call_tool("rl_edit_config", {"field": "max_count", "value": 4})
        as_text = await client.call_tool("rl_edit_config", {"field": "max_count", "value": "5"})
        as_float = await client.call_tool("rl_edit_config", {"field": "learning_rate", "value": 0.0002})
        as_bool = await client.call_tool("rl_edit_config", {"field": "max_count", "value": True})
        as_list = await client.call_tool("rl_edit_config", {"field": "max_count", "value": [1, 2]})
    assert not as_int.is_error and as_int.structured_content["value"] == 4
    assert not as_text.is_error and as_text.structured_content["value"] == 5
    assert not as_float.is_error and as_float.structured_content["value"] == pytest.approx(0.0002)
    # Accepted by the schema, refused by the field's own type, with the reason.
    for refused in (as_bool, as_list):
        assert refused.structured_content["applied"] is False and "max_count" in refused.content[0].text


async def test_json_text_for_a_text_field_arrives_as_text(home: Path) -> None:
    # The SDK parses JSON text into an object before the tool sees it; a text field gets it back.
    settings = Settings.from_env(make_env(home, MCP_RL_ENV_PATHS=str(FIXTURES / "envs" / "good")))
    async with Client(build_server(settings)) as client:
        await client.call_tool("rl_select_environment", {"name": "counting"})
        edited = await client.call_tool("rl_edit_config", {"field": "style", "value": '{"a": {"b": 1}}'})
        refused = await client.call_tool("rl_edit_config", {"field": "max_count", "value": '{"a": 1}'})
    assert not edited.is_error and edited.structured_content["applied"] is True
    assert json.loads(edited.structured_content["value"]) == {"a": {"b": 1}}
    assert refused.structured_content["applied"] is False and "max_count" in refused.content[0].text
