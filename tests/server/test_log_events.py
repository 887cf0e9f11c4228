"""Run events reach a client that set a log level, as MCP log messages (notifications/message):
through a real client on the 2025-11-25 handshake, with the run's end written to the registry as
its supervisor would."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.types import LoggingMessageNotificationParams

from mcp_rl.server import build_server
from mcp_rl.settings import Settings
from mcp_rl.supervisor import service
from mcp_rl.supervisor.states import RunState
from tests.conftest import FIXTURES, make_env
from tests.kit.runs import run_record
from tests.kit.wait import wait_for_async

pytestmark = pytest.mark.anyio


def _running(settings: Settings, run_id: str) -> None:
    registry = service.registry_for(settings)
    run_dir = settings.runs_dir / run_id
    (run_dir / "logs").mkdir(parents=True)
    (run_dir / "run.yaml").write_text(f"run_id: {run_id}\n")
    (run_dir / "metrics.jsonl").write_text(json.dumps({"step": 1, "reward/mean": 0.5}) + "\n")
    # Within its launch window and without a supervisor pid: not taken for a dead run.
    registry.create_run(run_record(run_id, run_dir, environment="counting"))
    registry.transition(run_id, RunState.RUNNING, "all processes ready")


async def _until(messages: list[Any], count: int, timeout_s: float = 15) -> None:
    async def enough() -> bool:
        return len(messages) >= count

    try:
        await wait_for_async(enough, timeout_s, f"{count} log messages")
    except AssertionError as exc:
        raise AssertionError(f"only {len(messages)} log messages: {messages}") from exc


async def test_a_client_that_sets_a_level_receives_run_events_at_or_above_it(home: Path) -> None:
    settings = Settings.from_env(
        make_env(home, MCP_RL_ENV_PATHS=str(FIXTURES / "envs" / "good"), MCP_RL_WATCH_INTERVAL="0.2")
    )
    for run_id in ("done1234", "fail1234", "capd1234"):
        _running(settings, run_id)
    received: list[LoggingMessageNotificationParams] = []

    async def on_log(params: LoggingMessageNotificationParams) -> None:
        received.append(params)

    async with Client(build_server(settings), logging_callback=on_log, mode="legacy") as client:
        assert client.server_capabilities.logging is not None
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # logging is deprecated in 2026-07-28, current in 2025-11-25
            await client.set_logging_level("notice")
        registry = service.registry_for(settings)
        registry.transition("done1234", RunState.COMPLETED, "trainer finished step 3 of 3")
        await _until(received, 1)
        registry.transition("fail1234", RunState.FAILED, "trainer exited with exit code 1: CUDA is not here")
        registry.transition("capd1234", RunState.STOPPING, "the trainer stops at its cost cap")
        registry.transition(
            "capd1234",
            RunState.STOPPED,
            "cost cap reached at $2.40 (estimated; max_cost_usd $2.5); stopped after step 3",
        )
        await _until(received, 3)
    done, failed, capped = received
    assert done.level == "notice" and done.logger == "mcp-rl"
    assert done.data["event"] == "run_completed" and done.data["run_id"] == "done1234"
    assert "completed" in done.data["message"] and "rl_get_results" in done.data["message"]
    assert failed.level == "error" and "exit code 1: CUDA is not here" in failed.data["message"]
    assert capped.level == "warning" and capped.data["event"] == "run_cost_cap_reached"


async def test_a_client_that_sets_its_level_again_has_one_level_and_hears_each_event_once(home: Path) -> None:
    """Each logging/setLevel is its own request (the SDK makes a session object per request): the
    second replaces the first for that client, it does not add a second listener."""
    settings = Settings.from_env(
        make_env(home, MCP_RL_ENV_PATHS=str(FIXTURES / "envs" / "good"), MCP_RL_WATCH_INTERVAL="0.2")
    )
    for run_id in ("done1234", "fail1234"):
        _running(settings, run_id)
    received: list[LoggingMessageNotificationParams] = []

    async def on_log(params: LoggingMessageNotificationParams) -> None:
        received.append(params)

    async with Client(build_server(settings), logging_callback=on_log, mode="legacy") as client:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # logging is deprecated in 2026-07-28, current in 2025-11-25
            await client.set_logging_level("notice")
            await client.set_logging_level("error")
        registry = service.registry_for(settings)
        registry.transition("done1234", RunState.COMPLETED, "trainer finished step 3 of 3")  # notice: below
        registry.transition("fail1234", RunState.FAILED, "trainer exited with exit code 1")
        await _until(received, 1)
        # The server has seen both ends once rl_list_runs says so and a few watch intervals passed.
        listed = (await client.call_tool("rl_list_runs", {})).structured_content
        assert {r["status"] for r in listed["runs"]} == {"completed", "failed"}
        await anyio.sleep(1.0)
    assert [(m.level, m.data["run_id"]) for m in received] == [("error", "fail1234")]


async def test_a_client_that_sets_no_level_is_sent_nothing(home: Path) -> None:
    settings = Settings.from_env(
        make_env(home, MCP_RL_ENV_PATHS=str(FIXTURES / "envs" / "good"), MCP_RL_WATCH_INTERVAL="0.2")
    )
    _running(settings, "done1234")
    received: list[Any] = []

    async def on_log(params: LoggingMessageNotificationParams) -> None:
        received.append(params)

    async with Client(build_server(settings), logging_callback=on_log, mode="legacy") as client:
        service.registry_for(settings).transition("done1234", RunState.COMPLETED, "trainer finished step 3 of 3")
        # The server has seen the end once rl_list_runs says completed and a watch interval passed.
        listed = (await client.call_tool("rl_list_runs", {})).structured_content
        assert listed["runs"][0]["status"] == "completed"
        await anyio.sleep(1.0)
    assert received == []


def _summary(test_id: str, state: str) -> str:
    from mcp_rl.inference_test.models import InferenceTestResult

    return InferenceTestResult.model_validate(
        {
            "test_id": test_id,
            "state": state,
            "environment": "counting",
            "environment_file": "counting.py",
            "test_config": {
                "num_steps": 1,
                "group_size": 2,
                "rollouts_per_model": 2,
                "total_rollouts": 2,
                "max_parallel": 1,
                "model_timeout_s": 60,
            },
            "models_tested": [],
            "summary": {
                "steps_requested": 1,
                "models_tested": 1,
                "models_finished": 1 if state != "running" else 0,
                "models_succeeded": 1 if state == "completed" else 0,
                "best_model": "local" if state == "completed" else None,
                "avg_accuracy": 0.5 if state == "completed" else None,
                "environment_working": True if state == "completed" else None,
                "output_directory": "x",
            },
            "started_at": 0.0,
            "elapsed_s": 1.0,
            "message": "",
            "resource": f"rl://tests/{test_id}",
        }
    ).model_dump_json()


def test_a_finished_smoke_test_is_told_once_at_info_and_a_failed_one_at_warning(home: Path) -> None:
    from mcp_rl.server.log_events import EventWatch

    settings = Settings.from_env(make_env(home))
    tests_dir = settings.tests_dir
    for test_id in ("20990101-000000-aaaaaa", "20990101-000001-bbbbbb"):
        (tests_dir / test_id).mkdir(parents=True)
        (tests_dir / test_id / "test.json").write_text("{}")
        (tests_dir / test_id / "summary.json").write_text(_summary(test_id, "running"))
    watch = EventWatch(settings)
    assert watch.poll() == []  # the baseline
    (tests_dir / "20990101-000000-aaaaaa" / "summary.json").write_text(_summary("20990101-000000-aaaaaa", "completed"))
    (tests_dir / "20990101-000001-bbbbbb" / "summary.json").write_text(_summary("20990101-000001-bbbbbb", "failed"))
    done, failed = watch.poll()
    assert done.level == "info" and done.data["event"] == "smoke_test_completed" and done.data["best_model"] == "local"
    assert "environment working: yes" in done.text and "rl_get_test_result" in done.text
    assert failed.level == "warning" and failed.data["event"] == "smoke_test_failed"
    assert watch.poll() == []  # told once
