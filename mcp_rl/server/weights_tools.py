"""Checkpoints and weights: list, keep, TTL, delete, export (adapter or merged, from local or
Tinker runs, optionally pushed to the Hub) and collect an export. Adapters over mcp_rl.weights."""

from __future__ import annotations

from typing import Annotated

import anyio
from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.types import ToolAnnotations
from pydantic import Field

from mcp_rl import background
from mcp_rl.server.budget import CallBudget, Progress
from mcp_rl.server.errors import tool_errors
from mcp_rl.server.state import AppState
from mcp_rl.weights import checkpoints, jobs
from mcp_rl.weights.checkpoints import CheckpointList
from mcp_rl.weights.jobs import ExportState, ExportStatus

READS = ToolAnnotations(read_only_hint=True, open_world_hint=True)
CHANGES = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=True)
DELETES = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=False, open_world_hint=True)
EXPORTS = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=True)
# Seconds kept free at the end of the budget to answer.
MARGIN_S = 3.0
POLL_S = 0.5

RunId = Annotated[str, Field(description="The run_id (see rl_list_runs).")]
Step = Annotated[int, Field(ge=0, description="The checkpoint's step (see rl_list_checkpoints).")]


async def _wait(settings, export_id: str, seconds: float, progress: Progress) -> ExportStatus:
    async def report(status: ExportStatus) -> None:
        if status.state == ExportState.RUNNING:
            await progress.report(f"export {export_id}: {status.phase}")

    return await background.wait_for_job(
        lambda: jobs.read_status(settings, export_id),
        lambda s: s.state == ExportState.RUNNING,
        max(0.0, seconds - POLL_S),
        report,
        POLL_S,
    )


def _answer(settings, status: ExportStatus) -> ExportStatus:
    tinker = jobs.spec_of(settings, status.export_id).weights.startswith("tinker://")
    status.message = jobs.describe(status, tinker)
    return status


def register(mcp: MCPServer, state: AppState) -> None:
    settings = state.settings

    @mcp.tool(title="List a run's checkpoints", annotations=READS)
    @tool_errors
    async def rl_list_checkpoints(run_id: RunId) -> CheckpointList:
        """A run's checkpoints: step, kind (state: resumable; adapter: local PEFT folder;
        sampler: Tinker sampler weights), where (local folder or tinker:// path), size, expiry
        (Tinker's own, when reachable), final/kept, and the run's local disk use. Intermediate
        Tinker checkpoints expire (7 days by default); the final one and kept ones never do."""
        return await anyio.to_thread.run_sync(checkpoints.list_checkpoints, settings, run_id)

    @mcp.tool(title="Keep a checkpoint forever", annotations=CHANGES)
    @tool_errors
    async def rl_keep_checkpoint(run_id: RunId, step: Step) -> CheckpointList:
        """Keep the checkpoint of `step` forever: on Tinker its TTL is removed (set-ttl --remove);
        locally retention (keep_last_checkpoints) never deletes it. Answers with the list."""
        return await anyio.to_thread.run_sync(checkpoints.keep, settings, run_id, step)

    @mcp.tool(title="Set a Tinker checkpoint's lifetime", annotations=CHANGES)
    @tool_errors
    async def rl_set_checkpoint_ttl(
        run_id: RunId,
        step: Step,
        ttl_hours: Annotated[
            float, Field(allow_inf_nan=False, description="New lifetime from now, 1 to 87600 hours (10 years).")
        ],
    ) -> CheckpointList:
        """Give a Tinker checkpoint a new lifetime from now (e.g. to extend one that expires
        soon). Local checkpoints never expire: use rl_keep_checkpoint to protect one."""
        return await anyio.to_thread.run_sync(checkpoints.set_ttl, settings, run_id, step, ttl_hours)

    @mcp.tool(title="Delete an intermediate checkpoint", annotations=DELETES)
    @tool_errors
    async def rl_delete_checkpoint(run_id: RunId, step: Step) -> CheckpointList:
        """Delete the checkpoint of `step` (its local folder, or on Tinker). Refused for the final
        one, a kept one and the newest resumable one. Answers with what is left."""
        return await anyio.to_thread.run_sync(checkpoints.delete, settings, run_id, step)

    @mcp.tool(title="Export a run's trained weights", annotations=EXPORTS)
    @tool_errors
    async def rl_export_weights(
        ctx: Context,
        run_id: RunId,
        step: Annotated[int | None, Field(ge=0, description="Checkpoint step; default: the newest.")] = None,
        format: Annotated[
            str,
            Field(
                description="'adapter': PEFT folder + tokenizer + model card; 'merged': a complete Hugging Face "
                "model (safetensors, config, generation config, tokenizer) loadable with AutoModelForCausalLM."
            ),
        ] = "adapter",
        dest: Annotated[
            str | None,
            Field(description="Absolute destination folder; default runs/<run_id>/exports/step_<N>-<format>."),
        ] = None,
        push_to_hub: Annotated[
            str | None,
            Field(description="Also push to this Hugging Face repo ('user/name'), private, with your HF_TOKEN/login."),
        ] = None,
        overwrite: Annotated[
            bool, Field(description="Replace an existing dest folder that an earlier mcp-rl export wrote.")
        ] = False,
    ) -> ExportStatus:
        """Take the trained model away: export a run's weights to a folder (and optionally the
        Hub). A Tinker run's checkpoint is downloaded through the Tinker SDK first, which starts
        a short Tinker session on the base model (no tokens; the answer's cost estimates the
        temporary checkpoint's storage, a fraction of a cent); merging a Tinker run needs the
        base weights from the Hugging Face hub. dest is an absolute folder path, never through
        a link, never '/', a home folder itself, or inside the runs folder (except the default);
        an existing dest is refused unless overwrite, which replaces only a folder an earlier
        export wrote. One export per dest at a time. A failed export leaves nothing behind; a
        failed push leaves the complete export and the same call pushes it again. Long exports
        continue in the background: the answer then has state 'running' and
        rl_get_export_result(export_id) collects it."""
        budget = CallBudget(settings.tool_time_budget_s)
        progress = Progress(ctx, budget)
        status = await anyio.to_thread.run_sync(
            lambda: jobs.start(
                settings, run_id, step=step, format=format, dest=dest, push_to_hub=push_to_hub, overwrite=overwrite
            )
        )
        status = await _wait(settings, status.export_id, budget.job_wait_s() - MARGIN_S, progress)
        return _answer(settings, status)

    @mcp.tool(title="Collect an export", annotations=READS)
    @tool_errors
    async def rl_get_export_result(
        ctx: Context,
        export_id: Annotated[str, Field(description="The export_id from rl_export_weights.")],
        wait_s: Annotated[
            float, Field(ge=0, allow_inf_nan=False, description="Wait up to this long (capped at the time budget).")
        ] = 0,
    ) -> ExportStatus:
        """The state of an export started by rl_export_weights: running (with its phase), done
        (folder, files, size, Hub URL) or failed (why)."""
        budget = CallBudget(settings.tool_time_budget_s)
        progress = Progress(ctx, budget)
        status = await _wait(settings, export_id, min(wait_s, budget.remaining() - MARGIN_S), progress)
        return _answer(settings, status)
