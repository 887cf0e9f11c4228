"""rl_test_inference and the rl://tests/... resources: thin adapters over inference_test.service."""

from __future__ import annotations

import json
import math
from functools import partial
from typing import Annotated, Any

import anyio
from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.types import CallToolResult, ResourceLink, TextContent, ToolAnnotations
from pydantic import Field

from mcp_rl.errors import NotFound
from mcp_rl.inference_test import service
from mcp_rl.inference_test.models import FINAL_MODEL_STATES, InferenceTestResult
from mcp_rl.server.budget import CallBudget, Progress
from mcp_rl.server.environment_tools import selected_spec_ready
from mcp_rl.server.errors import resource_errors, tool_errors
from mcp_rl.server.state import AppState
from mcp_rl.supervisor.tail import tail_lines

# The tool answers within the server's time budget (Settings.tool_time_budget_s); a test still
# going by then keeps running and is collected with rl_get_test_result(test_id).
HTML_MAX_BYTES = 2_000_000
JSONL_MAX_BYTES = 1_000_000

# Starts processes and (with OpenRouter) spends money; a second call runs a second test.
TEST_INFERENCE = ToolAnnotations(
    title="Smoke-test the environment with real inference",
    read_only_hint=False,
    destructive_hint=False,
    idempotent_hint=False,
    open_world_hint=True,
)

TestId = Annotated[str, Field(description="The test_id returned by rl_test_inference.")]


def _links(result: InferenceTestResult) -> list[ResourceLink]:
    links = [
        ResourceLink(
            type="resource_link",
            uri=result.resource,
            name=f"test {result.test_id}",
            description="The whole test result (read again while it is running).",
            mime_type="application/json",
        )
    ]
    for m in result.models_tested:
        if m.state not in FINAL_MODEL_STATES:
            continue
        for kind, mime, what in (
            ("jsonl", "application/jsonl", "scored groups (Atropos JSONL)"),
            ("html", "text/html", "HTML report of the rollouts"),
            ("log", "text/plain", "process log (tail)"),
        ):
            links.append(
                ResourceLink(
                    type="resource_link",
                    uri=m.resources[kind],
                    name=f"{m.model} {kind}",
                    description=f"{m.model}: {what}",
                    mime_type=mime,
                )
            )
    return links


def suggested_wait_s(budget_s: float) -> int:
    """The wait_s to suggest for the next rl_get_test_result: what fits the time budget, with
    a few seconds left for the answer (45 s -> 40)."""
    return max(1, math.floor(budget_s - 5))


def collect_hint(result: InferenceTestResult, budget_s: float) -> InferenceTestResult:
    """A running test's message names the tool that collects it (not every host reads resources)."""
    if result.state != "running":
        return result
    finished = result.summary.models_finished
    return result.model_copy(
        update={
            "message": (
                f"Still running ({finished}/{len(result.models_tested)} models finished, {result.elapsed_s:.0f} s so far); "
                f"it keeps running in the background, independent of this server (each model has at most "
                f"{result.test_config.model_timeout_s:.0f} s). Collect the result with "
                f"rl_get_test_result('{result.test_id}', wait_s={suggested_wait_s(budget_s)}), or cancel it with rl_cancel_test('{result.test_id}')."
            )
        }
    )


def as_tool_result(result: InferenceTestResult) -> CallToolResult:
    data = result.model_dump(mode="json")
    return CallToolResult(
        content=[TextContent(type="text", text=json.dumps(data, separators=(",", ":"))), *_links(result)],
        structured_content=data,
    )


def register(mcp: MCPServer, state: AppState) -> None:
    settings = state.settings

    def environments() -> Any:  # the environment tools' service: the session's selection and edits
        return state.environments

    @mcp.tool(title="Smoke-test the environment", annotations=TEST_INFERENCE)
    @tool_errors
    async def rl_test_inference(
        ctx: Context,
        num_steps: Annotated[int, Field(ge=1, le=20, description="Items (groups) to run per model. Default 3.")] = 3,
        group_size: Annotated[int, Field(ge=1, le=64, description="Completions per item. Default 16.")] = 16,
        models: Annotated[
            list[str] | None,
            Field(
                description=(
                    "OpenRouter model ids (any, e.g. 'qwen/qwen3-8b'; needs OPENROUTER_API_KEY) and/or 'local' "
                    "(the embedded default model on this machine), and/or a run's saved checkpoint: 'run:<run_id>' "
                    "(its newest) or 'run:<run_id>@<step>' (local runs; base + its LoRA adapter, served here). "
                    "Default: qwen/qwen3-8b, z-ai/glm-4.7-flash, "
                    "minimax/minimax-m2.7 with OPENROUTER_API_KEY, else 'local'."
                ),
                max_length=service.MAX_MODELS,
            ),
        ] = None,
    ) -> Annotated[CallToolResult, InferenceTestResult]:
        """Quick smoke test of the selected environment with real inference. Use BEFORE training.

        Checks that the environment loads, builds prompts, parses model output and scores it, by
        running Atropos `process` mode (no trainer) against each model, in parallel (at most 3 at
        a time). Default: 3 steps x 16 completions = 48 rollouts per model, testing 3 OpenRouter
        models of different sizes = 144 total (costs OpenRouter credits); without
        OPENROUTER_API_KEY one local model (free, CPU). Reports per model: accuracy (score > 0),
        mean score and spread, steps with a correct answer, two sample rollouts, errors with the
        log tail; and whether the environment works. The scores are a few training prompts sampled at
        the environment's temperature (no held-out claim: rl_evaluate_checkpoint). Spending is bounded:
        each model may make about num_steps x group_size requests (plus a quarter; in a
        multi-turn environment such as a GEM game, one per turn of each episode) and is stopped
        at that budget (state over_budget) or at a provider error, whose cause and fix
        are in its one-line `error`; `usage` shows requests, tokens and the provider's cost.
        test_config.cost_estimates states each model's estimated spend at most (its budget at
        OpenRouter's price) before its first request; local models cost $0.
        Answers within the server's time budget (default 45 s) with progress notifications; a
        test still running then keeps running in the background and this returns state
        "running" with its test_id: collect it with rl_get_test_result(test_id, wait_s=...),
        list tests with rl_list_tests, cancel with rl_cancel_test. Tests are kept in the state
        directory.
        """
        budget = CallBudget(state.settings.tool_time_budget_s)
        progress_reporter = Progress(ctx, budget)
        await selected_spec_ready(state.jobs, environments(), budget, progress_reporter, "rl_test_inference")
        env_ref, env_config = await anyio.to_thread.run_sync(service.session_environment, environments())
        started = await anyio.to_thread.run_sync(
            partial(
                service.start_test,
                settings,
                env_ref,
                env_config,
                num_steps=num_steps,
                group_size=group_size,
                models=models,
                max_parallel=service.DEFAULT_MAX_PARALLEL,
                model_timeout_s=service.DEFAULT_MODEL_TIMEOUT_S,
            )
        )

        async def progress(done: float, total: float, message: str) -> None:
            await progress_reporter.report(message, done, total)

        # The deadline counts from the call: reading the environment's config may have taken a while.
        result = await service.wait_for_test(settings, started.test_id, budget.job_wait_s(), progress)
        return as_tool_result(collect_hint(result, state.settings.tool_time_budget_s))

    @mcp.resource(
        "rl://tests",
        name="inference_tests",
        title="Inference tests",
        mime_type="application/json",
        description="Recent inference smoke tests (rl_test_inference), newest first.",
    )
    def tests_resource() -> str:
        return json.dumps({"tests": service.list_tests(settings, repair=False)}, indent=1)

    @mcp.resource(
        "rl://tests/{test_id}",
        name="inference_test",
        title="Inference test result",
        mime_type="application/json",
        description="An inference test: state, per-model results, summary (current while it runs).",
    )
    @resource_errors
    def test_resource(test_id: str) -> str:
        return service.read_test(settings, test_id, repair=False).model_dump_json(indent=1)

    @mcp.resource(
        "rl://tests/{test_id}/{model}",
        name="inference_test_model",
        title="Inference test: one model",
        mime_type="application/json",
        description="One model of an inference test (model = the folder name, e.g. qwen_qwen3-8b, or the id).",
    )
    @resource_errors
    def test_model_resource(test_id: str, model: str) -> str:
        return service.read_model(settings, test_id, model).model_dump_json(indent=1)

    @mcp.resource(
        "rl://tests/{test_id}/{model}/log{?tail}",
        name="inference_test_log",
        title="Inference test: model log",
        mime_type="text/plain",
        description="The tail of one model's process log (default 200 lines).",
    )
    @resource_errors
    def test_model_log(test_id: str, model: str, tail: int = 200) -> str:
        path = service.model_file(settings, test_id, model, "log")
        if not path.is_file():
            raise NotFound(f"No log yet for {model} in test {test_id} (it has not started).")
        return "\n".join(tail_lines(path, max(1, min(tail, 5000))))

    @mcp.resource(
        "rl://tests/{test_id}/{model}/html",
        name="inference_test_report",
        title="Inference test: HTML report",
        mime_type="text/html",
        description="Atropos's HTML report of one model's rollouts (written when the model finishes).",
    )
    @resource_errors
    def test_model_html(test_id: str, model: str) -> str:
        path = service.model_file(settings, test_id, model, "html")
        if not path.is_file():
            raise NotFound(f"No HTML report for {model} in test {test_id} (written only when its run succeeds).")
        if path.stat().st_size > HTML_MAX_BYTES:
            raise NotFound(f"The HTML report is larger than {HTML_MAX_BYTES} bytes; open {path} directly.")
        return path.read_text(encoding="utf-8", errors="replace")

    @mcp.resource(
        "rl://tests/{test_id}/{model}/jsonl{?limit}",
        name="inference_test_rollouts",
        title="Inference test: scored rollouts",
        mime_type="application/jsonl",
        description="The first `limit` scored groups (default 5) of one model, as Atropos wrote them.",
    )
    @resource_errors
    def test_model_jsonl(test_id: str, model: str, limit: int = 5) -> str:
        path = service.model_file(settings, test_id, model, "jsonl")
        if not path.is_file():
            raise NotFound(f"No JSONL for {model} in test {test_id} yet.")
        lines: list[str] = []
        size = 0
        with open(path, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if len(lines) >= max(1, limit) or size + len(line) > JSONL_MAX_BYTES:
                    break
                lines.append(line)
                size += len(line)
        return "".join(lines)
