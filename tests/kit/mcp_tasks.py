"""A client of MCP tasks (SEP-2663) for tests: it declares `io.modelcontextprotocol/tasks` as
interactive Claude Code does, takes a `resultType: "task"` answer as it is (the test drives the
task), and sends `tasks/get` / `tasks/cancel`."""

from __future__ import annotations

from typing import Any, Literal

from mcp import Client
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from mcp.types import CallToolResult, Request, RequestParams, Result
from pydantic import ConfigDict, Field

TASKS = "io.modelcontextprotocol/tasks"


class CreatedTask(Result):
    """The `resultType: "task"` answer to tools/call (SEP-2663's CreateTaskResult)."""

    model_config = ConfigDict(extra="allow")
    result_type: Literal["task"] = Field(alias="resultType")
    task_id: str
    status: str
    created_at: str
    last_updated_at: str
    ttl_ms: int | None
    poll_interval_ms: int | None = None


class DetailedTask(Result):
    model_config = ConfigDict(extra="allow")
    task_id: str
    status: str
    status_message: str | None = None
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None


class TaskParams(RequestParams):
    task_id: str


class TaskRequest(Request[TaskParams, str]):
    name_param = "taskId"


async def _unresolved(task: CreatedTask, _ctx: ClaimContext) -> CallToolResult:
    raise AssertionError(f"the test drives task {task.task_id} itself")


class TasksClient(ClientExtension):
    """Declares the tasks extension, as interactive Claude Code does on every request."""

    identifier = TASKS

    def claims(self) -> list[ResultClaim[Any]]:
        return [ResultClaim(result_type="task", model=CreatedTask, resolve=_unresolved)]


class Ack(Result):
    model_config = ConfigDict(extra="allow")


async def tasks_request(client: Client, method: str, task_id: str) -> Any:
    """`tasks/get` (a DetailedTask) or `tasks/cancel` (an empty acknowledgement)."""
    result_type = DetailedTask if method == "tasks/get" else Ack
    return await client.session.send_request(
        TaskRequest(method=method, params=TaskParams(task_id=task_id)), result_type
    )
