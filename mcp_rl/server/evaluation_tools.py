"""rl_evaluate_checkpoint and rl_get_evaluation: did a run's checkpoint learn? Thin adapters over
mcp_rl.evaluation.checkpoint_eval (the detached worker does the sampling)."""

from __future__ import annotations

import json
import math
from functools import partial
from typing import Annotated

import anyio
from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import Field

from mcp_rl.costs.consent import gate, require_yes
from mcp_rl.costs.evaluation import CHUNK_ITEMS
from mcp_rl.errors import UserError
from mcp_rl.evaluation import checkpoint_eval
from mcp_rl.evaluation.checkpoint_models import EvaluationResult
from mcp_rl.server.budget import CallBudget, Progress
from mcp_rl.server.cost_consent import ASK_TIMEOUT_S, asker
from mcp_rl.server.errors import tool_errors
from mcp_rl.server.state import AppState

# Starts a worker that loads models (local) or samples paid services (Tinker, OpenRouter).
EVALUATE = ToolAnnotations(
    title="Evaluate a run's checkpoint against its base",
    read_only_hint=False,
    destructive_hint=False,
    idempotent_hint=False,
    open_world_hint=True,
)
READS = ToolAnnotations(read_only_hint=True, open_world_hint=False)


def _collect_hint(result: EvaluationResult, budget_s: float) -> EvaluationResult:
    if result.state != "running":
        return result
    wait = max(1, math.floor(budget_s - 5))
    return result.model_copy(
        update={
            "message": f"{result.message} It keeps going in the background; collect it with "
            f"rl_get_evaluation('{result.eval_id}', wait_s={wait})."
        }
    )


def _answer(result: EvaluationResult) -> CallToolResult:
    data = result.model_dump(mode="json")
    return CallToolResult(
        content=[TextContent(type="text", text=json.dumps(data, separators=(",", ":")))], structured_content=data
    )


def register(mcp: MCPServer, state: AppState) -> None:
    settings = state.settings

    async def _wait(ctx: Context, budget: CallBudget, eval_id: str, wait_s: float) -> EvaluationResult:
        progress = Progress(ctx, budget)

        async def report(done: float, total: float, message: str) -> None:
            await progress.report(message, done, total)

        return await checkpoint_eval.wait_for_evaluation(settings, eval_id, min(wait_s, budget.remaining()), report)

    @mcp.tool(title="Evaluate a checkpoint against its base", annotations=EVALUATE)
    @tool_errors
    async def rl_evaluate_checkpoint(
        ctx: Context,
        run_id: Annotated[str, Field(description="The run whose saved checkpoint to evaluate (rl_list_runs).")],
        step: Annotated[
            int | None,
            Field(ge=0, description="A saved step of the run (default: its newest saved checkpoint)."),
        ] = None,
        compare_with: Annotated[
            list[str] | None,
            Field(
                description="More models to compare the checkpoint with, besides its base: OpenRouter ids "
                "(need OPENROUTER_API_KEY) or other runs' checkpoints as 'run:<run_id>' / 'run:<run_id>@<step>'.",
                max_length=checkpoint_eval.MAX_COMPARE,
            ),
        ] = None,
        max_cost_usd: Annotated[
            float | None,
            Field(
                ge=0,  # Gemini's schema has no exclusiveMinimum: 0 is refused below
                le=1_000_000,
                allow_inf_nan=False,
                description="Paid models (a Tinker run's checkpoint and base, OpenRouter ids): stop the evaluation "
                "before it could pass this estimated USD spend. None: no cap (a paid evaluation estimated above "
                "the confirmation threshold then needs the person's yes).",
            ),
        ] = None,
    ) -> Annotated[CallToolResult, EvaluationResult]:
        """Did it learn? Evaluate a run's saved checkpoint against the base model it started from
        on the held-out items of the run's environment (never trained on; the same items for every
        model; greedy sampling), and optionally against other models.

        Reports per model its score, and per comparison the paired statistics: both scores, the
        difference with a 95 % interval and a p-value (McNemar exact for right/wrong outcomes,
        Wilcoxon signed-rank for graded ones) in one sentence; which items flipped each way
        (improved / regressed) and a few sample pairs with both completions and the item's reference
        answer. Against the base it gives the same verdict as rl_check_status's held_out: `sentence`
        beside the best constant answer (`constant_baseline`: one answer given to every item),
        `learned` (False: a constant scores as much, so it did not learn the task whatever p says)
        and `warnings` (answer collapse, a gain of partial credit): report those. Uses the weights
        saved on disk, so it works while the run is still training. Answers within the server's
        time budget with progress; an evaluation still going then continues in the background
        and this returns state "running" with its eval_id: collect it with
        rl_get_evaluation(eval_id, wait_s=...). Bad input (unknown run or step, no checkpoint
        yet, an environment without held-out items, an unknown model) is refused at once with
        what exists instead.
        Cost: the answer's estimated_cost gives the estimated tokens and USD per model before
        anything is sampled (local models: $0), and cost what it has cost so far (estimated;
        OpenRouter's reported usage.cost beside it). A paid evaluation estimated above the
        confirmation threshold (default $5) without max_cost_usd is not started: it answers
        state "refused" with the estimate and the exact call that accepts it (or the person is
        asked, when the client supports elicitation). With max_cost_usd it stops (state
        "stopped") before it could pass the cap.
        """
        if max_cost_usd is not None and max_cost_usd <= 0:
            raise UserError(f"max_cost_usd must be more than 0 USD (got {max_cost_usd:g}); nothing was started.")
        budget = CallBudget(settings.tool_time_budget_s)
        planned = await anyio.to_thread.run_sync(
            partial(checkpoint_eval.plan_priced, settings, run_id, step, compare_with, max_cost_usd)
        )
        # Paid work above the threshold without a cap needs a yes (asked, or refused with the call
        # that accepts it); nothing is started or written before it.
        try:
            decision = gate(
                settings,
                planned.estimate,
                max_cost_usd,
                checkpoint_eval.what(planned),
                checkpoint_eval.accept_call(planned, compare_with),
                unit=f"chunk of {CHUNK_ITEMS} items",
            )
            await require_yes(decision, asker(ctx, min(ASK_TIMEOUT_S, max(1.0, budget.remaining() - 5))))
        except UserError as refusal:
            # An answer, not an error: hosts such as Hermes count every error toward a breaker.
            return _answer(checkpoint_eval.refused(planned, str(refusal)))
        started = await anyio.to_thread.run_sync(checkpoint_eval.start_planned, settings, planned)
        result = await _wait(ctx, budget, started.eval_id, budget.job_wait_s())
        if decision.needs_yes:
            result = result.model_copy(update={"message": result.message + " The person said yes to it without a cap."})
        return _answer(_collect_hint(result, settings.tool_time_budget_s))

    @mcp.tool(title="Get a checkpoint evaluation", annotations=READS)
    @tool_errors
    async def rl_get_evaluation(
        ctx: Context,
        eval_id: Annotated[str, Field(description="The eval_id returned by rl_evaluate_checkpoint.")],
        wait_s: Annotated[
            float,
            Field(
                ge=0,
                allow_inf_nan=False,
                description="Wait up to this long for a running evaluation to finish "
                "(capped at the server's time budget, default 45 s); 0 answers at once.",
            ),
        ] = 0,
    ) -> Annotated[CallToolResult, EvaluationResult]:
        """The result of a checkpoint evaluation (rl_evaluate_checkpoint) by its eval_id: per-model
        scores and progress, the paired comparisons with the base (and other models), flipped
        items and sample pairs. With wait_s it waits, with progress, for the evaluation to end.
        Read-only.
        """
        budget = CallBudget(settings.tool_time_budget_s)
        if wait_s > 0:
            result = await _wait(ctx, budget, eval_id, wait_s)
        else:
            result = await anyio.to_thread.run_sync(checkpoint_eval.read_evaluation, settings, eval_id)
        return _answer(_collect_hint(result, settings.tool_time_budget_s))
