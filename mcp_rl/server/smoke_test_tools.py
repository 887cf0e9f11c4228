"""Smoke tests after their call: collect a result by test_id, list tests, cancel one.

A smoke test often outlives rl_test_inference's time budget, and in several hosts the model
cannot read resources by itself, so everything rl://tests offers is reachable by a tool too.
Adapters over mcp_rl.inference_test.service.
"""

from __future__ import annotations

import logging
from typing import Annotated

import anyio
from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.types import CallToolResult, ToolAnnotations
from pydantic import BaseModel, Field

from mcp_rl.inference_test import service
from mcp_rl.inference_test.models import InferenceTestResult
from mcp_rl.server.budget import CallBudget, Progress, run_within
from mcp_rl.server.errors import tool_errors
from mcp_rl.server.inference_tools import TestId, as_tool_result, collect_hint
from mcp_rl.server.state import AppState

log = logging.getLogger(__name__)

# Reads only: a test whose worker died reads as failed, and the server's watcher records that
# and ends its leftover model processes (see service.read_test and mcp_rl.supervisor.upkeep).
READS_TEST = ToolAnnotations(read_only_hint=True, open_world_hint=False)
CANCEL = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False)
MAX_TESTS_PAGE = 50


class TestBrief(BaseModel):
    __test__ = False  # not a pytest test class

    test_id: str
    state: str
    environment: str
    models: list[str]
    best_model: str | None = None
    environment_working: bool | None = None
    started_at: float
    resource: str


class TestList(BaseModel):
    tests: list[TestBrief] = Field(description="Newest first.")
    count: int
    message: str


def register(mcp: MCPServer, state: AppState) -> None:
    settings = state.settings
    jobs = state.jobs

    @mcp.tool(title="Get a smoke test's result", annotations=READS_TEST)
    @tool_errors
    async def rl_get_test_result(
        ctx: Context,
        test_id: TestId,
        wait_s: Annotated[
            float,
            Field(
                ge=0,
                allow_inf_nan=False,
                description="Wait up to this long for a running test to finish "
                "(capped at the server's time budget, default 45 s); 0 answers at once.",
            ),
        ] = 0,
    ) -> Annotated[CallToolResult, InferenceTestResult]:
        """The result of a smoke test (rl_test_inference) by its test_id: state, per-model
        accuracy and scores on training prompts (sampled), samples, errors. Use it to collect a test that was
        still running when rl_test_inference answered; with wait_s it waits (with progress) for
        the test to end. Read-only: a test whose worker died reads as failed (the server records
        that and ends its leftover model processes by itself).
        """
        budget = CallBudget(settings.tool_time_budget_s)
        progress = Progress(ctx, budget)
        if wait_s > 0:

            async def report(done: float, total: float, message: str) -> None:
                await progress.report(message, done, total)

            result = await service.wait_for_test(
                settings, test_id, min(wait_s, budget.remaining()), report, repair=False
            )
        else:
            result = await anyio.to_thread.run_sync(service.read_test, settings, test_id, False)
        return as_tool_result(collect_hint(result, settings.tool_time_budget_s))

    @mcp.tool(title="List smoke tests", annotations=READS_TEST)
    @tool_errors
    async def rl_list_tests(
        ctx: Context,
        limit: Annotated[
            int, Field(ge=1, le=MAX_TESTS_PAGE, description="At most this many tests, newest first.")
        ] = 10,
    ) -> TestList:
        """List recent smoke tests (rl_test_inference), newest first: test_id, state,
        environment, models, whether the environment works. Collect one with
        rl_get_test_result(test_id).
        """
        budget = CallBudget(settings.tool_time_budget_s)
        done, briefs, job = await run_within(
            jobs,
            f"list-tests:{limit}",
            "reading the smoke tests",
            lambda: service.list_tests(settings, limit, repair=False),
            budget,
            Progress(ctx, budget),
        )
        if not done:
            return TestList(
                tests=[],
                count=0,
                message=f"Still reading the tests ({job.running_for():.0f} s); call rl_list_tests again in a moment.",
            )
        tests = [TestBrief.model_validate(b) for b in briefs]
        return TestList(
            tests=tests,
            count=len(tests),
            message="Collect a result with rl_get_test_result(test_id); cancel a running one with rl_cancel_test(test_id).",
        )

    @mcp.tool(title="Cancel a smoke test", annotations=CANCEL)
    @tool_errors
    async def rl_cancel_test(ctx: Context, test_id: TestId) -> Annotated[CallToolResult, InferenceTestResult]:
        """Cancel a running smoke test: its model processes and the local model server are
        ended (no more OpenRouter spending); results of models already finished stay. Cancelling
        a test that has ended does nothing. If the processes are still ending when the time
        budget is spent, the cancel goes on in the background: rl_get_test_result(test_id) shows
        when the test has ended.
        """
        budget = CallBudget(settings.tool_time_budget_s)
        service.test_dir(settings, test_id)  # an unknown id is refused before anything starts
        cancel_s = max(1.0, budget.remaining() - 5.0)
        done, result, job = await run_within(
            jobs,
            f"cancel:{test_id}",
            f"cancelling test {test_id}",
            lambda: service.cancel_test(settings, test_id, timeout_s=cancel_s),
            budget,
            Progress(ctx, budget),
        )
        if not done:
            result = await anyio.to_thread.run_sync(service.read_test, settings, test_id)
            result = result.model_copy(
                update={
                    "message": f"Cancelling test {test_id} ({job.running_for():.0f} s so far); it goes on in the "
                    f"background. rl_get_test_result('{test_id}') shows when it has ended."
                }
            )
        return as_tool_result(result)

    async def repair_tests() -> None:
        # The read tools only read (a dead worker's test reads as failed); this records the end
        # and ends the test's leftover model processes.
        while True:
            try:
                repaired = await anyio.to_thread.run_sync(service.repair_dead_tests, settings)
                if repaired:
                    log.warning("smoke tests whose worker died were recorded as failed: %s", ", ".join(repaired))
            except Exception as exc:  # a test folder half-written or removed meanwhile: next time
                log.debug("repairing dead tests failed: %r", exc)
            await anyio.sleep(settings.watch_interval_s)

    state.background_tasks.append(repair_tests)
