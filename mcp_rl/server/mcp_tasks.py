"""MCP tasks (SEP-2663, extension `io.modelcontextprotocol/tasks`) over the background jobs.

A smoke test, a checkpoint evaluation and an export run in a detached worker
(mcp_rl.background); their tools wait for the job within the time budget and then answer
"running, collect it with ...". A client that declares the tasks extension on a 2026-07-28
request (interactive Claude Code does; `claude -p`, Codex, Gemini CLI, opencode, Hermes and
Cursor do not) can take the job as a task instead: the call answers at once with a task, and the
client polls `tasks/get` while the person goes on working. Every other request gets the tool's
usual answer, never a task (a task sent to a client that did not ask for it fails there).

A task IS the job, not a copy of it: its id names the job (`test:<test_id>`, `eval:<eval_id>`,
`export:<export_id>`) and everything `tasks/get` says is read from the job's folder, by the same
tool that collects it (`rl_get_test_result`, `rl_get_evaluation`, `rl_get_export_result`): the
final result is exactly that tool's answer, a task survives a server restart as its job does, and
the polling tools and the task always agree. `tasks/cancel` cancels through the job's service
(mcp_rl.background stops the worker's group, whose identity is proven, and records the cancel).

Through the SDK's public extension seam only: `MCPServer(extensions=[...])`, `methods()` for the
three requests (2026-07-28 only), and `intercept_tool_call`, whose `resultType: "task"` answer the
SDK's runner passes through on 2026-07-28 connections (and never produces on older ones: the
interceptor checks the era too). The job services are imported at the first task request, not at
start-up.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.extension import Extension, MethodBinding
from mcp.server.mcpserver import Context, require_client_extension
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError
from mcp.types import INTERNAL_ERROR, INVALID_PARAMS, CallToolRequestParams, CallToolResult, RequestParams
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import ConfigDict, Field

from mcp_rl.errors import McpRlError
from mcp_rl.server.budget import TASK_CALL

if TYPE_CHECKING:
    from mcp_rl.server.rl_server import RlServer
    from mcp_rl.settings import Settings

log = logging.getLogger(__name__)

TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
# Interactive Claude Code polls every 2 s whatever it is told; other clients follow this.
POLL_INTERVAL_MS = 2000
# A cancel waits this long for the worker to end its own children before its group is killed.
CANCEL_GRACE_S = 10.0
ERA = frozenset(MODERN_PROTOCOL_VERSIONS)


@dataclass(frozen=True)
class JobTool:
    """A tool whose work is a background job, and how a task reaches that job."""

    kind: str  # the task id's prefix
    id_field: str  # where the tool's answer names the job, and the collecting tool's argument
    collect: str  # the tool that collects the job (its answer is the task's result)
    folder: Callable[[Settings, str], Path]  # the job's folder; raises UnknownId
    cancel: Callable[[Settings, str, float], object]  # cancels it within a grace


def _test_folder(settings: Settings, job_id: str) -> Path:
    from mcp_rl.inference_test import service  # a job service: at the first task request

    return service.test_dir(settings, job_id)


def _cancel_test(settings: Settings, job_id: str, grace_s: float) -> object:
    from mcp_rl.inference_test import service  # a job service: at the first task request

    return service.cancel_test(settings, job_id, timeout_s=grace_s)


def _eval_folder(settings: Settings, job_id: str) -> Path:
    from mcp_rl.evaluation import checkpoint_eval  # a job service: at the first task request

    return checkpoint_eval.eval_folder(settings, job_id)


def _cancel_eval(settings: Settings, job_id: str, grace_s: float) -> object:
    from mcp_rl.evaluation import checkpoint_eval  # a job service: at the first task request

    return checkpoint_eval.cancel_evaluation(settings, job_id, grace_s)


def _export_folder(settings: Settings, job_id: str) -> Path:
    from mcp_rl.weights import jobs  # a job service: at the first task request

    jobs.read_status(settings, job_id)  # an unknown id is refused here
    return jobs.exports_dir(settings) / job_id


def _cancel_export(settings: Settings, job_id: str, grace_s: float) -> object:
    from mcp_rl.weights import jobs  # a job service: at the first task request

    return jobs.cancel(settings, job_id, grace_s)


# The tools whose work can outlast a call: each starts a job of mcp_rl.background.
JOB_TOOLS: dict[str, JobTool] = {
    "rl_test_inference": JobTool("test", "test_id", "rl_get_test_result", _test_folder, _cancel_test),
    "rl_evaluate_checkpoint": JobTool("eval", "eval_id", "rl_get_evaluation", _eval_folder, _cancel_eval),
    "rl_export_weights": JobTool("export", "export_id", "rl_get_export_result", _export_folder, _cancel_export),
}
KINDS: dict[str, JobTool] = {tool.kind: tool for tool in JOB_TOOLS.values()}


class TaskParams(RequestParams):
    """`tasks/get`, `tasks/cancel` (and `tasks/update`): the task's id."""

    model_config = ConfigDict(populate_by_name=True, extra="allow")

    task_id: str = Field(alias="taskId")


def declares_tasks(ctx: ServerRequestContext[Any, Any]) -> bool:
    """The request's client takes tasks: it speaks 2026-07-28 and declared the extension (on
    that era, in this very request's envelope)."""
    if ctx.protocol_version not in ERA:
        return False
    capabilities = ctx.session.client_capabilities
    return bool(capabilities and capabilities.extensions and TASKS_EXTENSION in capabilities.extensions)


def _iso(timestamp: float) -> str:
    return dt.datetime.fromtimestamp(timestamp, dt.UTC).isoformat().replace("+00:00", "Z")


def _not_found(task_id: str) -> MCPError:
    return MCPError(code=INVALID_PARAMS, message=f"Task {task_id!r} not found (tasks are mcp-rl's background jobs).")


class TasksExtension(Extension):
    """The tasks extension of an `RlServer` (`attach` it once the server is built: the SDK
    never hands an extension its server)."""

    identifier = TASKS_EXTENSION

    def __init__(self) -> None:
        self._server: RlServer | None = None

    def attach(self, server: RlServer) -> None:
        self._server = server

    @property
    def server(self) -> RlServer:
        if self._server is None:
            raise RuntimeError("TasksExtension.attach(server) was not called")
        return self._server

    def methods(self) -> Sequence[MethodBinding]:
        return [
            MethodBinding("tasks/get", TaskParams, self._get, protocol_versions=ERA),
            MethodBinding("tasks/update", TaskParams, self._update, protocol_versions=ERA),
            MethodBinding("tasks/cancel", TaskParams, self._cancel, protocol_versions=ERA),
        ]

    # --- tools/call ------------------------------------------------------------------------
    async def intercept_tool_call(
        self, params: CallToolRequestParams, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        job_tool = JOB_TOOLS.get(params.name)
        if job_tool is None or not declares_tasks(ctx):
            return await call_next(ctx)
        # The tool runs as for anyone (checks, consent, start), but waits for none of its job.
        token = TASK_CALL.set(True)
        try:
            result = await call_next(ctx)
        finally:
            TASK_CALL.reset(token)
        job_id = _running_job(result, job_tool)
        if job_id is None:
            return result  # refused, failed at once, or already done: the tool's own answer
        task_id = f"{job_tool.kind}:{job_id}"
        log.info("%s answered with task %s", params.name, task_id)
        return {"resultType": "task", **await self._snapshot(task_id, ctx, with_result=False)}

    # --- tasks/* ---------------------------------------------------------------------------
    async def _get(self, ctx: ServerRequestContext[Any, Any], params: TaskParams) -> dict[str, Any]:
        require_client_extension(ctx, TASKS_EXTENSION)
        return await self._snapshot(params.task_id, ctx, with_result=True)

    async def _update(self, ctx: ServerRequestContext[Any, Any], params: TaskParams) -> dict[str, Any]:
        # No job of ours ever asks for input (`input_required`): an update has nothing to answer.
        require_client_extension(ctx, TASKS_EXTENSION)
        await self._locate(params.task_id)
        return {}

    async def _cancel(self, ctx: ServerRequestContext[Any, Any], params: TaskParams) -> dict[str, Any]:
        require_client_extension(ctx, TASKS_EXTENSION)
        job_tool, job_id, _folder = await self._locate(params.task_id)
        # The worker is told to stop and its group killed after the grace: nothing of it is
        # left when this answers. An ended job is left as it is (terminal states are final).
        await anyio.to_thread.run_sync(job_tool.cancel, self.server.app_settings, job_id, CANCEL_GRACE_S)
        log.info("task %s cancelled", params.task_id)
        return {}

    async def _locate(self, task_id: str) -> tuple[JobTool, str, Path]:
        kind, _, job_id = task_id.partition(":")
        job_tool = KINDS.get(kind)
        if job_tool is None or not job_id:
            raise _not_found(task_id)
        try:
            folder = await anyio.to_thread.run_sync(job_tool.folder, self.server.app_settings, job_id)
        except McpRlError:
            raise _not_found(task_id) from None
        return job_tool, job_id, folder

    async def _snapshot(
        self, task_id: str, ctx: ServerRequestContext[Any, Any], *, with_result: bool
    ) -> dict[str, Any]:
        """The task as its job is now: the collecting tool's answer, read as a task."""
        from mcp_rl import background  # with the job services, off the start-up path

        job_tool, job_id, folder = await self._locate(task_id)
        context = Context(request_context=ctx, mcp_server=self.server)
        task: dict[str, Any] = {"taskId": task_id, "ttlMs": None, "pollIntervalMs": POLL_INTERVAL_MS}
        try:
            answer = await self.server.call_tool(job_tool.collect, {job_tool.id_field: job_id}, context)
        except ToolError as exc:  # the job's files could not be read
            status, payload = "failed", {"error": {"code": INTERNAL_ERROR, "message": str(exc)}}
        else:
            data = answer.structured_content if isinstance(answer, CallToolResult) else None
            state = data.get("state") if isinstance(data, dict) else None
            if state == "running":
                status, payload = "working", {}
            elif state == "cancelled" or (
                state == "failed" and await anyio.to_thread.run_sync(background.cancelled, folder)
            ):
                # An export has no cancelled state of its own: its killed worker reads as failed.
                status, payload = "cancelled", {}
            else:
                status = "completed"
                payload = {"result": answer.model_dump(by_alias=True, mode="json", exclude_none=True)}
            if isinstance(data, dict) and isinstance(data.get("message"), str):
                task["statusMessage"] = data["message"]
        worker = await anyio.to_thread.run_sync(background.read_worker, folder)
        created = worker.started_at if worker is not None else folder.stat().st_mtime
        now = dt.datetime.now(dt.UTC).timestamp()
        task.update(status=status, createdAt=_iso(created), lastUpdatedAt=_iso(now))
        if with_result:
            task.update(payload)
        return task


def _running_job(result: HandlerResult, job_tool: JobTool) -> str | None:
    """The id of the job the tool's answer says is still running, if it says so."""
    if not isinstance(result, CallToolResult) or result.is_error:
        return None
    data = result.structured_content
    if not isinstance(data, dict) or data.get("state") != "running":
        return None
    job_id = data.get(job_tool.id_field)
    return job_id if isinstance(job_id, str) and job_id else None
