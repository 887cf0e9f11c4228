"""rl_read_log and rl_wait_for_run: following a run through tools (hosts such as VS Code's agent
mode and claude.ai do not let the model read resources by itself). Adapters over mcp_rl.follow."""

from __future__ import annotations

from typing import Annotated

import anyio
from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.types import ToolAnnotations
from pydantic import Field

from mcp_rl import follow
from mcp_rl.server.budget import CallBudget, Progress
from mcp_rl.server.errors import tool_errors
from mcp_rl.server.state import AppState
from mcp_rl.server.training_tools import (
    STATUS_NOTE,
    STATUS_READ,
    RunId,
)
from mcp_rl.supervisor.bounded import bounded_latest
from mcp_rl.supervisor.states import LOG_NAMES

READ_LOG = ToolAnnotations(read_only_hint=True, open_world_hint=False)

WAIT_DOC = f"""Wait for a training run to move on, instead of polling: returns as soon as the run
reaches `until_step` (default: its next step) or changes state (e.g. starting -> running, or it
ends), or when the time is up, whichever comes first, with its full status and latest metrics
(step, reward mean, loss). Not rate-limited. Call it again to keep waiting. {STATUS_NOTE}"""


def register(mcp: MCPServer, state: AppState) -> None:
    settings = state.settings

    @mcp.tool(title="Read a run's log", annotations=READ_LOG)
    @tool_errors
    async def rl_read_log(
        run_id: RunId,
        process: Annotated[
            str, Field(description=f"Which log: {', '.join(LOG_NAMES)} (the trainer's is the most telling).")
        ] = "trainer",
        cursor: Annotated[
            int | None,
            Field(
                ge=0,
                description="Byte offset to read from: the next_cursor of the previous answer. "
                "Leave it out to get the end of the log.",
            ),
        ] = None,
        max_bytes: Annotated[
            int, Field(ge=1, le=follow.MAX_CHUNK_BYTES, description="At most this many bytes of log text.")
        ] = follow.DEFAULT_CHUNK_BYTES,
    ) -> follow.LogChunk:
        """Read a training run's log a piece at a time, without re-reading what you have seen.

        Without `cursor`: the end of the log. With `cursor` (the `next_cursor` of the last
        answer): what was written after it. Text is cut at whole lines and at most `max_bytes`;
        `at_end` says whether more is there yet.
        """
        return await anyio.to_thread.run_sync(
            lambda: follow.read_log_chunk(settings, run_id, process, cursor, max_bytes)
        )

    @mcp.tool(title="Wait for a run's next step", annotations=STATUS_READ, description=WAIT_DOC)
    @tool_errors
    async def rl_wait_for_run(
        ctx: Context,
        run_id: RunId,
        until_step: Annotated[
            int | None,
            Field(
                ge=0, description="Return once the run has logged this step. Default: the step after the current one."
            ),
        ] = None,
        timeout_s: Annotated[
            float | None,
            Field(
                # ge, not gt: exclusiveMinimum is not in Gemini's schema subset (a boolean in OpenAPI 3.0).
                ge=0.1,
                allow_inf_nan=False,
                description="Wait at most this long, in seconds (capped at the server's time budget, default 45 s).",
            ),
        ] = None,
    ) -> follow.RunWait:
        budget = CallBudget(settings.tool_time_budget_s)
        progress = Progress(ctx, budget)
        wait_s = min(timeout_s or budget.remaining(), budget.remaining())

        async def report(step: float, total: float | None, message: str) -> None:
            await progress.report(message, step, total)

        waited = await follow.wait_for_run(settings, run_id, until_step, wait_s, report)
        return waited.model_copy(update={"status": bounded_latest(waited.status)})
