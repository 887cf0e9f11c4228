"""An exploring agent's first steps are answers, not tool errors (Hermes Agent cuts a server off
after three `isError` results in a row): no environment selected, an unknown run, test,
evaluation or export id. The answer lists what exists and validates against each tool's published
output schema (the SDK client here checks it). What is really wrong stays an error."""

from __future__ import annotations

from pathlib import Path

import pytest
from mcp import Client

from mcp_rl.server import build_server
from mcp_rl.settings import Settings
from tests.conftest import FIXTURES, make_env

pytestmark = pytest.mark.anyio
RUN = "20990101-000000-known1"

EXPLORING_CALLS = [
    ("rl_get_current_config", {}, "environment"),
    ("rl_edit_config", {"field": "total_steps", "value": 3}, "environment"),
    ("rl_start_training", {}, "environment"),
    ("rl_test_inference", {"num_steps": 1, "group_size": 2}, "environment"),
    ("rl_check_status", {"run_id": "nope"}, "run_id"),
    ("rl_read_log", {"run_id": "nope"}, "run_id"),
    ("rl_get_results", {"run_id": "nope"}, "run_id"),
    ("rl_get_rollouts", {"run_id": "nope"}, "run_id"),
    ("rl_list_checkpoints", {"run_id": "nope"}, "run_id"),
    ("rl_get_test_result", {"test_id": "20990101-000000-abcdef"}, "test_id"),
    ("rl_cancel_test", {"test_id": "nope"}, "test_id"),
    ("rl_get_evaluation", {"eval_id": "nope"}, "eval_id"),
    ("rl_get_export_result", {"export_id": "nope"}, "export_id"),
]


async def test_exploring_calls_are_answers_listing_what_exists(home: Path) -> None:
    settings = Settings.from_env(make_env(home, MCP_RL_ENV_PATHS=str(FIXTURES / "envs" / "good")))
    (settings.runs_dir / RUN).mkdir(parents=True)
    (settings.runs_dir / RUN / "run.yaml").write_text(f"run_id: {RUN}\n")
    async with Client(build_server(settings)) as client:
        for tool, args, kind in EXPLORING_CALLS:
            result = await client.call_tool(tool, args)  # the client validates against the output schema
            assert not result.is_error, (tool, result.content)
            answer = result.structured_content
            assert answer["found"] is False and answer["kind"] == kind, (tool, answer)
            if kind == "run_id":
                assert answer["known"] == [RUN] and RUN in result.content[0].text, (tool, answer)
            if kind == "environment":
                assert "rl_select_environment" in answer["message"], answer
        # What is really wrong is still an error: an unknown argument, a wrong type, an unknown environment.
        bogus = await client.call_tool("rl_check_status", {"run_id": "nope", "bogus": 1})
        typed = await client.call_tool("rl_wait_for_run", {"run_id": RUN, "timeout_s": "soon"})
        unknown_env = await client.call_tool("rl_select_environment", {"name": "no-such-environment"})
        assert bogus.is_error and typed.is_error and unknown_env.is_error
        tools = (await client.list_tools()).tools
    for tool in tools:
        schema = tool.output_schema
        assert schema is not None and "ExploringAnswer" in schema["$defs"], tool.name
        assert "required" not in schema and schema["anyOf"][0]["required"], tool.name


async def test_a_huge_unknown_id_is_clipped_in_every_echo(home: Path) -> None:
    """Issue 43 item 7: a 1 MB id came back whole from rl_get_evaluation, rl_get_test_result and
    rl_cancel_test; every tool echoing an id clips it (~100 characters and an ellipsis)."""
    settings = Settings.from_env(make_env(home))
    huge = "x" * 1_000_000
    calls = [(tool, {**args, kind: huge}) for tool, args, kind in EXPLORING_CALLS if kind not in ("environment",)]
    async with Client(build_server(settings)) as client:
        for tool, args in calls:
            result = await client.call_tool(tool, args)
            text = " ".join(getattr(c, "text", "") for c in result.content)
            assert len(text) < 3_000, (tool, len(text))
            assert "x" * 130 not in text and ("…" in text or "more characters" in text), (tool, text[:300])
            assert len(str(result.structured_content or "")) < 5_000, tool
