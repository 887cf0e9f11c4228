"""One MCP session against the task's server: a fresh stdio process (or a Streamable HTTP
session) per episode, its tools filtered and converted, its calls bounded in time and bytes.

The server's environment is an allow-list (`mcp_server_env`): what a program needs to start,
plus the variables the task names; mcp-rl's own keys never, even when named.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio
import httpx2
from mcp import MCPError
from mcp.client import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CONNECTION_CLOSED, TextContent

from mcp_rl.environments.mcp_family.taskfile import McpTask
from mcp_rl.environments.mcp_family.tools import ToolSpec, cap_bytes
from mcp_rl.processes import MARKER_ENV
from mcp_rl.settings import SECRET_ENV_VARS

# What any server program needs to start and find its runtime (node, python, locale).
START_TIMEOUT_S = 60.0  # npx may fetch a package on first start
SERVER_BASE_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TMPDIR", "USER", "LOGNAME", "SHELL", "TERM")


def mcp_server_env(named: Iterable[str], base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of an MCP server the task runs: SERVER_BASE_ENV plus the names the task
    lists (and the run's process marker); mcp-rl's keys (SECRET_ENV_VARS) never, even when a
    task names one.

    It runs inside the environment process, whose own environment is already the user-code
    allow-list (`Settings.user_code_env`); this narrows it to what the server itself needs."""
    source = dict(os.environ) if base is None else dict(base)
    # The run's process marker too: the server starts its own session (the SDK's stdio client),
    # so ending the run's process groups misses it; the marker is how the run's stop finds it.
    wanted = set(SERVER_BASE_ENV) | set(named) | {MARKER_ENV}
    return {name: value for name, value in source.items() if name in wanted and name not in SECRET_ENV_VARS}


def offered_tools(tools: list[Any], allowed: list[str] | None) -> list[ToolSpec]:
    """The server's tools the policy is offered: those named by the task (all of them named must
    exist), else every tool that does not declare destructiveHint or openWorldHint."""
    by_name = {t.name: t for t in tools}
    if allowed is not None:
        missing = [n for n in allowed if n not in by_name]
        if missing:
            raise UnknownTools(f"the task allows tools the server does not have: {missing}; it has {sorted(by_name)}")
        chosen = [by_name[n] for n in allowed]
    else:
        chosen = [t for t in tools if not _risky(t)]
    return [
        ToolSpec(name=t.name, description=t.description or "", parameters=dict(t.input_schema or {"type": "object"}))
        for t in chosen
    ]


def _risky(tool: Any) -> bool:
    notes = tool.annotations
    return notes is not None and (notes.destructive_hint is True or notes.open_world_hint is True)


class ToolServerError(RuntimeError):
    """The server could not be started, listed or called; the episode (or the run) ends with it."""


class UnknownTools(ToolServerError):
    """The task allows tools (by name) the server does not have."""


@dataclass
class CallOutcome:
    text: str  # what the model sees (capped)
    is_error: bool
    full_bytes: int


class ToolServer:
    """An open session: the offered tools and `call`."""

    def __init__(
        self, session: ClientSession, tools: list[ToolSpec], task: McpTask, listed: list[Any] | None = None
    ) -> None:
        self.session = session
        self.tools = tools
        self.task = task
        self.listed = listed or []  # every tool the server listed (the SDK's Tool objects)

    async def call(self, name: str, arguments: dict[str, Any]) -> CallOutcome:
        limits = self.task.spec.limits
        try:
            with anyio.fail_after(limits.call_timeout_s):
                result = await self.session.call_tool(name, arguments, read_timeout_seconds=limits.call_timeout_s)
        except TimeoutError:
            text = f"Error: the tool {name} did not answer within {limits.call_timeout_s:g} s"
            return CallOutcome(text=text, is_error=True, full_bytes=len(text))
        except MCPError as exc:
            if exc.code == CONNECTION_CLOSED:
                # The server died (or closed the session): not the model's error to see, the
                # episode's end; an environment whose every episode ends so ends the run with it.
                raise ToolServerError(
                    f"the MCP server of {self.task.path.name} ended during the episode (calling {name}): {exc}"
                ) from exc
            text = f"Error: {type(exc).__name__}: {exc}"
            return CallOutcome(text=cap_bytes(text, limits.output_bytes), is_error=True, full_bytes=len(text.encode()))
        except Exception as exc:  # an MCP error answer (bad arguments, unknown tool) is the model's to see
            text = f"Error: {type(exc).__name__}: {exc}"
            return CallOutcome(text=cap_bytes(text, limits.output_bytes), is_error=True, full_bytes=len(text.encode()))
        parts = []
        for block in result.content:
            parts.append(block.text if isinstance(block, TextContent) else f"[{block.type} content]")
        if not parts and result.structured_content is not None:
            parts.append(str(result.structured_content))
        text = "\n".join(parts)
        return CallOutcome(
            text=cap_bytes(text, limits.output_bytes), is_error=bool(result.is_error), full_bytes=len(text.encode())
        )


@asynccontextmanager
async def open_server(task: McpTask, env: Mapping[str, str] | None = None) -> AsyncIterator[ToolServer]:
    """A session on a fresh server process (stdio) or a new HTTP session; closed (the process
    ended by the SDK: stdin closed, then SIGTERM, then SIGKILL) when the block exits.
    `env`: the environment to pick the server's variables from (default: this process's)."""
    try:
        async with _session(task, env) as server:
            yield server
    except BaseExceptionGroup as group:
        # The transports' task groups wrap what ends the block (ours or the caller's) in an
        # exception group: the one error inside is what the caller wants to handle.
        leaves = _leaves(group)
        if len(leaves) == 1 and isinstance(leaves[0], Exception):
            raise leaves[0] from group
        raise


def _leaves(group: BaseExceptionGroup) -> list[BaseException]:
    out: list[BaseException] = []
    for exc in group.exceptions:
        out.extend(_leaves(exc) if isinstance(exc, BaseExceptionGroup) else [exc])
    return out


@asynccontextmanager
async def _session(task: McpTask, env: Mapping[str, str] | None) -> AsyncIterator[ToolServer]:
    spec = task.spec.server
    source = dict(os.environ) if env is None else dict(env)
    async with AsyncExitStack() as stack:
        try:
            if spec.command is not None:
                params = StdioServerParameters(
                    command=spec.command,
                    args=list(spec.args),
                    env=mcp_server_env(spec.env_vars, source),
                    cwd=str(task.server_cwd()),
                )
                streams = await stack.enter_async_context(stdio_client(params))
            else:
                assert spec.url is not None
                headers = {}
                if spec.auth_env_var and source.get(spec.auth_env_var):
                    headers["Authorization"] = f"Bearer {source[spec.auth_env_var]}"
                client = await stack.enter_async_context(httpx2.AsyncClient(headers=headers))
                streams = await stack.enter_async_context(streamable_http_client(spec.url, http_client=client))
            session = await stack.enter_async_context(ClientSession(streams[0], streams[1]))
            # The deadline wraps only requests: a cancel scope around the transports' own task
            # groups could not be left before them.
            with anyio.fail_after(START_TIMEOUT_S):
                await session.initialize()
                listed = await session.list_tools()
        except TimeoutError:
            raise ToolServerError(
                f"the MCP server of {task.path.name} did not start and list its tools within {START_TIMEOUT_S:g} s"
            ) from None
        except Exception as exc:
            raise ToolServerError(
                f"the MCP server of {task.path.name} failed to start: {type(exc).__name__}: {exc}"
            ) from exc
        tools = offered_tools(list(listed.tools), task.spec.tools)
        yield ToolServer(session, tools, task, list(listed.tools))
