"""MCP tasks (SEP-2663) over real stdio: the real server, the real smoke-test worker and
environment, OpenRouter FAKED on loopback.

A client that declares `io.modelcontextprotocol/tasks` on 2026-07-28 gets a task for
rl_test_inference at once and the tool's own final answer through `tasks/get`; `tasks/cancel`
ends a running one and leaves no process of it; a client that does not declare the extension
(2026-07-28 or 2025-11-25) gets today's answer, never a task.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import anyio
import psutil
import pytest
from mcp import Client
from mcp.types import CallToolResult

from mcp_rl.processes import marker_for
from mcp_rl.settings import Settings
from tests.conftest import stdio_params
from tests.fakes.fake_openrouter import FakeOpenRouter
from tests.kit.mcp_tasks import CreatedTask, TasksClient, tasks_request
from tests.kit.wait import wait_for_async

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

BUDGET_S = 20.0  # the server's tool time budget: a task must come far sooner than this
SLOW_MODEL = "qwen/qwen3-8b"  # answered by the fake after LATENCY_S per request
HANG_MODEL = "fake/hanging-model"
LATENCY_S = 1.0


def params(home: Path, fake: FakeOpenRouter) -> Any:
    return stdio_params(
        home,
        MCP_RL_TOOL_TIME_BUDGET=str(BUDGET_S),
        OPENROUTER_API_KEY="sk-or-FAKE-tasks",
        OPENROUTER_BASE_URL=fake.base_url,
    )


async def select_arithmetic(client: Client) -> None:
    deadline = time.monotonic() + 120
    while True:
        result = await client.call_tool("rl_select_environment", {"name": "arithmetic"})
        assert not result.is_error, result.content
        if result.structured_content["status"] == "selected":
            return
        assert time.monotonic() < deadline, "arithmetic was never selected"


async def start_task(client: Client, args: dict[str, Any]) -> tuple[CreatedTask, float]:
    started = time.monotonic()
    task = await client.session.call_tool("rl_test_inference", args, allow_claimed=True)
    took = time.monotonic() - started
    assert isinstance(task, CreatedTask), task
    return task, took


def processes_of_test(settings: Settings, test_id: str) -> list[psutil.Process]:
    """Every live process carrying the test's marker (the worker, its model processes, servers)."""
    marker = marker_for("test", settings.tests_dir / test_id)
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.status() != psutil.STATUS_ZOMBIE and proc.environ().get("MCP_RL_MARKER") == marker:
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


async def test_a_declaring_client_gets_a_task_and_the_tool_answer_through_tasks_get(home: Path) -> None:
    with FakeOpenRouter(latency_s=LATENCY_S) as fake:
        async with Client(params(home, fake), extensions=[TasksClient()]) as client:
            assert client.protocol_version == "2026-07-28"
            await select_arithmetic(client)
            task, took = await start_task(client, {"num_steps": 2, "group_size": 2, "models": [SLOW_MODEL]})
            assert took < 5, f"the task came after {took:.1f} s"
            assert task.status == "working" and task.task_id.startswith("test:")
            assert task.poll_interval_ms and task.ttl_ms is None
            test_id = task.task_id.removeprefix("test:")
            statuses = []
            deadline = time.monotonic() + 240
            while True:
                got = await tasks_request(client, "tasks/get", task.task_id)
                statuses.append(got.status)
                if got.status != "working":
                    break
                assert got.status_message and got.result is None
                assert time.monotonic() < deadline, "the task never ended"
                await anyio.sleep(1)
            # The task's result is exactly what the polling tool answers for the same job.
            collected = await client.call_tool("rl_get_test_result", {"test_id": test_id})
            listed = await client.call_tool("rl_list_tests", {})
    assert got.status == "completed", got
    assert got.result is not None
    assert got.result["structuredContent"] == collected.structured_content
    assert got.result["structuredContent"]["state"] == "completed"
    assert got.result["structuredContent"]["test_id"] == test_id
    assert [t["test_id"] for t in listed.structured_content["tests"]] == [test_id]
    assert "working" in statuses  # it was followed while it ran, not only found finished


async def test_tasks_cancel_ends_a_running_task_and_leaves_no_process(home: Path) -> None:
    settings = Settings.from_env({"MCP_RL_HOME": str(home)})
    with FakeOpenRouter(behaviours={HANG_MODEL: "hang"}, hang_s=600) as fake:
        async with Client(params(home, fake), extensions=[TasksClient()]) as client:
            await select_arithmetic(client)
            task, took = await start_task(client, {"num_steps": 1, "group_size": 2, "models": [HANG_MODEL]})
            assert took < 5, f"the task came after {took:.1f} s"
            test_id = task.task_id.removeprefix("test:")
            # the model is being asked (and never answers)
            await wait_for_async(lambda: HANG_MODEL in fake.models_seen(), 120, "the hanging model to be asked")
            assert processes_of_test(settings, test_id), "the test runs no process to cancel"
            assert (await tasks_request(client, "tasks/get", task.task_id)).status == "working"
            ack = await tasks_request(client, "tasks/cancel", task.task_id)
            left = processes_of_test(settings, test_id)
            got = await tasks_request(client, "tasks/get", task.task_id)
            collected = await client.call_tool("rl_get_test_result", {"test_id": test_id})
            unknown = None
            try:
                await tasks_request(client, "tasks/get", "test:20990101-000000-nosuch")
            except Exception as exc:  # an MCPError with INVALID_PARAMS
                unknown = exc
    assert ack.model_extra == {"resultType": "complete"}  # an empty acknowledgement
    assert left == [], f"processes left after tasks/cancel: {left}"
    assert got.status == "cancelled", got
    assert collected.structured_content["state"] == "cancelled"
    assert unknown is not None and "not found" in str(unknown)


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_a_client_without_the_extension_gets_todays_answer(home: Path, mode: Any) -> None:
    with FakeOpenRouter(latency_s=LATENCY_S) as fake:
        async with Client(params(home, fake), mode=mode) as client:
            await select_arithmetic(client)
            answer = await client.session.call_tool(
                "rl_test_inference", {"num_steps": 1, "group_size": 2, "models": [SLOW_MODEL]}, allow_claimed=True
            )
            tasks_get_refused = None
            if mode == "auto":
                try:
                    await tasks_request(client, "tasks/get", "test:any")
                except Exception as exc:  # -32021: the extension was not declared
                    tasks_get_refused = exc
    assert isinstance(answer, CallToolResult) and not answer.is_error, answer
    assert answer.structured_content["state"] in ("running", "completed")
    assert mode == "legacy" or tasks_get_refused is not None
