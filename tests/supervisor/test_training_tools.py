"""The training tools and run resources in memory (both protocol eras): schemas, annotations,
errors the agent can act on, and path safety. Runs here are recorded directly in the registry;
real runs are in test_e2e_training.py."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from mcp import Client, MCPError

from mcp_rl.server import build_server
from mcp_rl.settings import Settings
from mcp_rl.supervisor import service
from mcp_rl.supervisor.states import RunState
from tests.conftest import make_env
from tests.kit.runs import run_record

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["auto", "legacy"])
def mode(request) -> str:
    return request.param


@pytest.fixture
def settings(home: Path) -> Settings:
    return Settings.from_env(make_env(home))


def _completed_run(settings: Settings, run_id: str = "abc12345") -> Path:
    registry = service.registry_for(settings)
    run_dir = settings.runs_dir / run_id
    (run_dir / "logs").mkdir(parents=True)
    (run_dir / "run.yaml").write_text(f"run_id: {run_id}\n")
    (run_dir / "logs" / "trainer.log").write_text("".join(f"trainer line {i}\n" for i in range(300)))
    (run_dir / "metrics.jsonl").write_text(
        "".join(json.dumps({"step": s, "reward/mean": s / 10, "train/loss": 1 / s}) + "\n" for s in (1, 2, 3))
    )
    now = time.time()
    registry.create_run(run_record(run_id, run_dir, created_at=now - 120))
    registry.transition(run_id, RunState.RUNNING, "all processes ready")
    registry.transition(run_id, RunState.COMPLETED, "trainer finished step 3 of 3")
    return run_dir


async def test_tool_surface_matches_the_original_with_honest_annotations(settings, mode):
    async with Client(build_server(settings), mode=mode) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
    # The original took no arguments; the two added ones are optional.
    assert tools["rl_start_training"].input_schema.get("required", []) == []
    assert set(tools["rl_start_training"].input_schema["properties"]) == {
        "idempotency_key",
        "expected_revision",
        "allow_concurrent",
        "force",
    }
    assert "WARNING: Training takes hours." in tools["rl_start_training"].description
    for name in ("rl_check_status", "rl_stop_training"):
        assert tools[name].input_schema["required"] == ["run_id"]
    assert tools["rl_list_runs"].input_schema.get("required", []) == []
    for name in ("rl_start_training", "rl_check_status", "rl_stop_training", "rl_list_runs"):
        assert tools[name].output_schema is not None
    start, check, stop, listing = (
        tools[n].annotations for n in ("rl_start_training", "rl_check_status", "rl_stop_training", "rl_list_runs")
    )
    assert (start.read_only_hint, start.destructive_hint, start.idempotent_hint, start.open_world_hint) == (
        False,
        False,
        False,
        True,
    )
    assert (stop.read_only_hint, stop.destructive_hint, stop.idempotent_hint) == (False, True, True)
    # Status reads write nothing (the server's watcher repairs a dead run): read-only, so hosts
    # that auto-approve read-only tools let an agent poll without asking each time.
    polling = ("rl_check_status", "rl_list_runs", "rl_wait_for_run", "rl_get_test_result", "rl_list_tests")
    for name in polling:
        assert tools[name].annotations.read_only_hint is True, name
    assert check.read_only_hint is True and listing.read_only_hint is True


async def test_unknown_run_ids_are_answers_pointing_to_rl_list_runs(settings, mode):
    # Answers, not tool errors (server/exploring.py): hosts count errors against the server.
    async with Client(build_server(settings), mode=mode) as client:
        for tool in ("rl_check_status", "rl_stop_training"):
            result = await client.call_tool(tool, {"run_id": "nope"})
            assert not result.is_error and "rl_list_runs" in result.content[0].text
            assert result.structured_content["found"] is False
        result = await client.call_tool("rl_start_training", {})
        assert not result.is_error and "rl_select_environment" in result.content[0].text


async def test_status_list_and_resources_of_a_recorded_run(settings, mode):
    _completed_run(settings)
    async with Client(build_server(settings), mode=mode) as client:
        result = await client.call_tool("rl_check_status", {"run_id": "abc12345"})
        status = result.structured_content
        assert json.loads(result.content[0].text)["status"] == "completed"
        links = [c.uri for c in result.content[1:]]
        assert "rl://runs/abc12345" in links and "rl://runs/abc12345/logs/trainer" in links
        assert status["status"] == "completed" and status["metrics"]["step"] == 3
        assert status["metrics"]["reward_mean"] == pytest.approx(0.3) and status["running_time_minutes"] >= 2
        assert status["logs"]["trainer"] == "rl://runs/abc12345/logs/trainer"
        stop = (await client.call_tool("rl_stop_training", {"run_id": "abc12345"})).structured_content
        assert stop["was_running"] is False and "already ended" in stop["message"]
        runs = (await client.call_tool("rl_list_runs", {})).structured_content
        assert runs["count"] == 1 and runs["runs"][0]["latest_reward"] == pytest.approx(0.3)

        listing = json.loads((await client.read_resource("rl://runs")).contents[0].text)
        assert listing["runs"][0]["run_id"] == "abc12345"
        one = json.loads((await client.read_resource("rl://runs/abc12345")).contents[0].text)
        assert one["status"] == "completed"
        assert (await client.read_resource("rl://runs/abc12345/config")).contents[0].text == "run_id: abc12345\n"
        metrics = json.loads((await client.read_resource("rl://runs/abc12345/metrics")).contents[0].text)
        assert [row["step"] for row in metrics["rows"]] == [1, 2, 3]
        log = (await client.read_resource("rl://runs/abc12345/logs/trainer")).contents[0].text
        assert log.splitlines()[-1] == "trainer line 299" and len(log.splitlines()) == service.DEFAULT_LOG_TAIL + 1
        short = (await client.read_resource("rl://runs/abc12345/logs/trainer?tail=3")).contents[0].text
        assert short.splitlines()[1:] == ["trainer line 297", "trainer line 298", "trainer line 299"]


async def test_bad_run_ids_and_process_names_are_not_found_never_paths(settings, mode):
    _completed_run(settings)
    async with Client(build_server(settings), mode=mode) as client:
        for uri in (
            "rl://runs/nope",
            "rl://runs/nope/logs/env",
            "rl://runs/abc12345/logs/passwd",
            "rl://runs/../logs/env",
            "rl://runs/abc12345/logs/..%2F..%2Fstate.db",
            "rl://runs/nope/config",
        ):
            with pytest.raises(MCPError) as info:
                await client.read_resource(uri)
            assert info.value.error.code == -32602, uri
