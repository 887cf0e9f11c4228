"""Turning service errors into MCP tool errors, in one place."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, TypeVar

from mcp.server.mcpserver.exceptions import ResourceNotFoundError, ToolError

from mcp_rl import redact
from mcp_rl.errors import Exploring, McpRlError, NotFound, clip_message

F = TypeVar("F", bound=Callable[..., Any])


def tool_errors(fn: F) -> F:
    """Decorate a tool: an McpRlError becomes a ToolError the agent can read and act on, except
    what an exploring agent meets (Exploring: nothing selected, an unknown id), which goes on
    unchanged for RlServer.call_tool to answer (server/exploring.py)."""

    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
            try:
                return await fn(*args, **kwargs)
            except Exploring:
                raise
            except McpRlError as exc:
                raise ToolError(clip_message(redact.scrub(str(exc)))) from exc

        return async_wrapper  # type: ignore[return-value]

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except Exploring:
            raise
        except McpRlError as exc:
            raise ToolError(clip_message(redact.scrub(str(exc)))) from exc

    return wrapper  # type: ignore[return-value]


def resource_errors(fn: F) -> F:
    """Decorate a resource: NotFound becomes -32602 with our message (SEP-2164)."""

    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
            try:
                return await fn(*args, **kwargs)
            except NotFound as exc:
                raise ResourceNotFoundError(clip_message(redact.scrub(str(exc)))) from exc

        return async_wrapper  # type: ignore[return-value]

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except NotFound as exc:
            raise ResourceNotFoundError(clip_message(redact.scrub(str(exc)))) from exc

    return wrapper  # type: ignore[return-value]
