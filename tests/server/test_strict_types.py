"""Strict argument types on every tool (issue 33): no string, boolean or number is converted into
another; a too-large number and a dest that cannot be a path are clear errors naming the
argument; nothing is written. Through the real server in memory (the SDK's own Client)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from mcp_rl.server import build_server
from mcp_rl.server.strict_types import type_problem
from mcp_rl.settings import Settings
from tests.conftest import make_env

pytestmark = pytest.mark.anyio

CASES: list[tuple[str, dict[str, Any], list[str]]] = [
    ("rl_export_weights", {"run_id": "r1", "overwrite": "yes"}, ["overwrite must be true or false", "'yes'"]),
    ("rl_export_weights", {"run_id": "r1", "step": "3"}, ["step must be a whole number", "without quotes"]),
    ("rl_export_weights", {"run_id": "r1", "step": True}, ["step must be a whole number", "the boolean"]),
    ("rl_evaluate_checkpoint", {"run_id": "r1", "max_cost_usd": True}, ["max_cost_usd must be a number"]),
    ("rl_evaluate_checkpoint", {"run_id": "r1", "max_cost_usd": "5"}, ["max_cost_usd must be a number"]),
    ("rl_set_checkpoint_ttl", {"run_id": "r1", "step": 1, "ttl_hours": 1e308}, ["ttl_hours is too large"]),
    ("rl_keep_checkpoint", {"run_id": "r1", "step": 10**30}, ["step is too large"]),
    ("rl_keep_checkpoint", {"run_id": 5, "step": 1}, ["run_id must be a string, got the number 5"]),
    ("rl_export_weights", {"run_id": "r1", "dest": "/tmp/a\x00b"}, ["NUL byte"]),
    ("rl_export_weights", {"run_id": "r1", "dest": "/tmp/" + "x" * 4995}, ["dest is 5000 characters long"]),
    ("rl_export_weights", {"run_id": "r1", "dest": "out"}, ["relative", "absolute path"]),
]


async def test_wrong_types_and_impossible_values_are_refused_by_name(home: Path) -> None:
    settings = Settings.from_env(make_env(home))
    async with Client(build_server(settings)) as client:
        for tool, args, words in CASES:
            result = await client.call_tool(tool, args)
            text = result.content[0].text
            assert result.is_error, (tool, args, text)
            for word in words:
                assert word in text, (tool, args, text)
            assert "Error executing tool" not in text or any(w in text for w in words)
    assert not (home / "exports").exists() and not (home / "evaluations").exists()


def test_the_right_types_pass() -> None:
    integer = {"anyOf": [{"type": "integer", "minimum": 0}, {"type": "null"}]}
    assert type_problem("step", 3, integer) is None and type_problem("step", None, integer) is None
    assert type_problem("ttl_hours", 3, {"type": "number"}) is None  # an integer is a number
    assert type_problem("overwrite", False, {"type": "boolean"}) is None
    assert type_problem("value", "5", {}) is None  # any type (rl_edit_config's value): the model decides
