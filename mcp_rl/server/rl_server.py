"""`RlServer`: the SDK's `MCPServer`, with mcp-rl's rules for every tool, and its surface
registered off the path a host waits on.

What it adds, through MCPServer's public methods (`list_tools`, `call_tool`, ...):

* Published schemas (`list_tools`): each tool's input schema says `additionalProperties: false`,
  each output schema also takes the exploring answer (server/exploring.py), and only JSON
  Schema's own `format` values appear (server/schema_formats.py).
* Strict calls (`call_tool`): an argument a tool does not declare, or of the wrong JSON type, is
  refused before anything runs, naming the valid ones (server/strict.py); the arguments a host
  adds to every tool (Gemini CLI's `wait_for_previous`) are dropped.
* Exploring answers (`call_tool`): "no environment selected" and an unknown id come back as a
  normal result saying what exists, not as a tool error (Hermes counts errors toward a breaker).
* Registration at first need: a host waits for `initialize` and `tools/list` before anything
  else (Codex gives a server 10 s, opencode 5 s by default). Importing the tool modules and their
  services and registering them was ~40 % of what mcp-rl adds to a bare MCPServer's start, so the
  server is built with none of it: the lifespan registers the surface on a worker thread while
  the server already answers, and `tools/list` answers from the tool catalog an earlier start
  kept (server/tool_catalog.py: the same bytes, keyed by the code and versions). Every other
  request (a tool call, resources, prompts, completions, subscriptions, logging) waits for the
  surface and its start-up hooks first. A start with no valid catalog registers before it
  answers `tools/list`, and keeps the catalog for the next start.

Requests MCPServer has no public hook for (legacy `resources/subscribe`, `logging/setLevel`)
are routed here at build, so `initialize` declares their capabilities, and dispatched to the
handler a tool module sets later (`set_request_handler`).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from contextlib import asynccontextmanager
from typing import Any

import anyio
from mcp.server import MCPServer, ServerRequestContext
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError
from mcp.types import (
    Completion,
    CompletionArgument,
    CompletionContext,
    InputRequiredResult,
    SetLevelRequestParams,
    SubscribeRequestParams,
    UnsubscribeRequestParams,
)
from mcp.types import Tool as MCPTool
from mcp_types import PARSE_ERROR, SERVER_INFO_META_KEY, DiscoverResult
from mcp_types.methods import serialize_server_result
from mcp_types.version import LATEST_MODERN_VERSION, MODERN_PROTOCOL_VERSIONS
from pydantic import BaseModel

from mcp_rl import redact
from mcp_rl.server import tool_catalog
from mcp_rl.server.exploring import exploring_cause, exploring_result, output_schema_with_answer
from mcp_rl.server.schema_formats import standard_formats
from mcp_rl.server.stdin_guard import PARSE_ERROR_METHOD, UnparseableParams
from mcp_rl.server.strict import checked_arguments, strict_schema
from mcp_rl.settings import Settings

log = logging.getLogger(__name__)

# The surface is registered at the first request that needs it, or after `tools/list` (answered
# from the catalog first: a registration running beside it would compete with it for the
# interpreter), or at the latest this long after the server started, so that its start-up hooks
# and watchers run for a client that asks nothing.
REGISTER_WITHIN_S = 2.0

# Request methods routed at build and answered by a handler set at registration.
LATE_METHODS: dict[str, type] = {
    "resources/subscribe": SubscribeRequestParams,
    "resources/unsubscribe": UnsubscribeRequestParams,
    "logging/setLevel": SetLevelRequestParams,
}

Handler = Callable[[ServerRequestContext[Any], Any], Awaitable[Any]]
Completer = Callable[[Any, CompletionArgument, CompletionContext | None], Awaitable[Completion | None]]
# Work handed to the lifespan by the surface: awaited once at start-up, or run until exit.
LifespanWork = Callable[[], Coroutine[Any, Any, None]]


class RlServer(MCPServer):
    """An MCPServer whose surface `register(server)` adds (tools, resources, prompts, handlers)
    on first need, and whose tools follow mcp-rl's rules (see the module docstring)."""

    def __init__(
        self,
        settings: Settings,
        register: Callable[[RlServer], None],
        after_registration: Callable[[], None] | None = None,
        **kwargs: Any,
    ) -> None:
        self.app_settings = settings
        self._register_surface = register
        self._after_registration = after_registration
        self._registered = False
        self._register_lock = threading.Lock()
        self._started: anyio.Event | None = None  # set when the lifespan's start-up hooks have run
        self._wanted: anyio.Event | None = None  # set when something needs the surface
        self._published: dict[str, MCPTool] | None = None
        self._kept: list[MCPTool] | None = tool_catalog.read(settings)
        self._late: dict[str, Handler] = {}
        self._completer: Completer | None = None
        # Given by the surface's modules at registration (tool_modules.register).
        self.startup_hooks: list[LifespanWork] = []
        self.background_tasks: list[LifespanWork] = []
        super().__init__(lifespan=self._lifespan, **kwargs)
        routed: dict[str, tuple[type, Handler]] = {
            method: (params_type, self._late_handler(method)) for method, params_type in LATE_METHODS.items()
        }
        # The answer to a line the stdio transport could not parse (server/stdin_guard.py).
        routed[PARSE_ERROR_METHOD] = (UnparseableParams, self._unparseable)
        for method, (params_type, handler) in routed.items():
            # MCPServer has no public hook for these (the SDK's migration guide uses the low-level server).
            self._lowlevel_server.add_request_handler(method, params_type, handler)
        self.completion()(self._complete)

    # --- the surface, registered once ---------------------------------------------------------
    @property
    def surface_registered(self) -> bool:
        return self._registered

    def set_request_handler(self, method: str, handler: Handler) -> None:
        """The handler of one of LATE_METHODS (routed since the server was built)."""
        if method not in LATE_METHODS:
            raise ValueError(f"{method} is not routed late; route it in LATE_METHODS")
        self._late[method] = handler

    def set_completer(self, completer: Completer) -> None:
        self._completer = completer

    def _register_once(self) -> None:
        with self._register_lock:
            if not self._registered:
                try:
                    self._register_surface(self)
                    self._registered = True
                finally:
                    done, self._after_registration = self._after_registration, None
                    if done is not None:
                        done()

    def _want(self) -> None:
        if self._wanted is not None:
            self._wanted.set()

    async def registered(self) -> None:
        """Wait until the surface is registered (on a worker thread: it imports the services)."""
        if not self._registered:
            self._want()
            await anyio.to_thread.run_sync(self._register_once)

    async def ready(self) -> None:
        """Wait until the surface is registered and, under the lifespan, its start-up hooks ran."""
        await self.registered()
        if self._started is not None:
            await self._started.wait()

    @asynccontextmanager
    async def _lifespan(self, _server: MCPServer) -> AsyncIterator[None]:
        self.app_settings.ensure_home()
        for note in self.app_settings.placeholder_notes():
            log.warning(note)
        # One lifespan per stdio server; over HTTP one per session, each with its own events (a
        # later session's events replace an earlier one's, which never leave a request waiting).
        started, wanted = anyio.Event(), anyio.Event()
        self._started, self._wanted = started, wanted
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(self._start, tasks, started, wanted)
            try:
                yield None
            finally:
                tasks.cancel_scope.cancel()
                started.set()
                if self._started is started:
                    self._started = self._wanted = None

    async def _start(self, tasks: anyio.abc.TaskGroup, started: anyio.Event, wanted: anyio.Event) -> None:
        try:
            if self._kept is not None:  # without a catalog tools/list needs the surface now
                with anyio.move_on_after(REGISTER_WITHIN_S):
                    await wanted.wait()
            await self.registered()
            for hook in self.startup_hooks:
                await hook()
            for task in self.background_tasks:
                tasks.start_soon(task)
        finally:
            started.set()  # requests go on (and fail on their own) even if a hook failed

    # --- server/discover, answered before the SDK is loaded --------------------------------
    def discover_result(self, version: str = LATEST_MODERN_VERSION) -> dict[str, Any]:
        """The `server/discover` result the SDK sends at `version`, as on the wire: what the
        next start of `mcp-rl serve` answers with before it imports the SDK (mcp_rl/first_answer.py).
        Built as the SDK's default handler and its runner build it (a test compares the bytes)."""
        low = self._lowlevel_server  # capabilities, instructions and the serverInfo stamp live there
        result = DiscoverResult(
            supported_versions=list(MODERN_PROTOCOL_VERSIONS),
            capabilities=low.get_capabilities(protocol_version=version),
            instructions=low.instructions,
        )
        data = serialize_server_result(
            "server/discover", version, result.model_dump(by_alias=True, mode="json", exclude_none=True)
        )
        data.setdefault("resultType", "complete")
        data["_meta"] = {**(data.get("_meta") or {}), SERVER_INFO_META_KEY: low.server_info_stamp}
        return data

    # --- tools ------------------------------------------------------------------------------
    async def list_tools(self) -> list[MCPTool]:
        if self._published is None and not self._registered and self._kept is not None:
            self._want()  # the registration starts once this answer is on its way
            return self._kept
        return list((await self._published_tools()).values())

    async def _published_tools(self) -> dict[str, MCPTool]:
        if self._published is None:
            await self.registered()
            published = [published_tool(tool) for tool in await super().list_tools()]
            if self._kept != published:
                tool_catalog.write(self.app_settings, published)
            self._kept = published
            self._published = {tool.name: tool for tool in published}
        return self._published

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None) -> Any:
        tool = (await self._published_tools()).get(name)
        if tool is not None:
            arguments = checked_arguments(name, arguments, tool.input_schema)
        try:
            result = await super().call_tool(name, arguments, context)
        except ToolError as exc:
            exploring = exploring_cause(exc)
            if exploring is None:
                if redact.has_secret(str(exc)):
                    raise type(exc)(redact.scrub(str(exc))) from None
                raise
            result = await anyio.to_thread.run_sync(exploring_result, exploring, self.app_settings)
        return scrubbed_result(result)

    # --- everything else waits for the surface -----------------------------------------------
    async def list_resources(self) -> Any:
        await self.ready()
        return await super().list_resources()

    async def list_resource_templates(self) -> Any:
        await self.ready()
        return await super().list_resource_templates()

    async def read_resource(self, *args: Any, **kwargs: Any) -> Any:
        await self.ready()
        contents = await super().read_resource(*args, **kwargs)
        if isinstance(contents, InputRequiredResult):
            return contents
        # Resources (run logs, reports) leave the process too: scrubbed like tool answers.
        return [
            dataclasses.replace(c, content=redact.scrub(c.content)) if isinstance(c.content, str) else c
            for c in contents
        ]

    async def list_prompts(self) -> Any:
        await self.ready()
        return await super().list_prompts()

    async def get_prompt(self, *args: Any, **kwargs: Any) -> Any:
        await self.ready()
        return await super().get_prompt(*args, **kwargs)

    async def _unparseable(self, ctx: ServerRequestContext[Any], params: UnparseableParams) -> Any:
        raise MCPError(
            code=PARSE_ERROR,
            message=f"Parse error: the request could not be read as JSON-RPC ({params.reason}); nothing was done. "
            "Send one JSON-RPC message per line, as UTF-8 JSON without lone surrogates or deep nesting.",
        )

    def _late_handler(self, method: str) -> Handler:
        async def handler(ctx: ServerRequestContext[Any], params: Any) -> Any:
            await self.ready()
            return await self._late[method](ctx, params)

        return handler

    async def _complete(
        self, ref: Any, argument: CompletionArgument, context: CompletionContext | None
    ) -> Completion | None:
        await self.ready()
        return await self._completer(ref, argument, context) if self._completer is not None else None


def published_tool(tool: MCPTool) -> MCPTool:
    """A tool as clients see it: strict input, the exploring answer as an alternative output,
    standard formats only."""
    output = tool.output_schema
    return tool.model_copy(
        update={
            "input_schema": standard_formats(strict_schema(tool.input_schema)),
            "output_schema": standard_formats(output_schema_with_answer(output)) if output is not None else None,
        }
    )


def client_of(session: Any) -> object:
    """The client a legacy request (`resources/subscribe`, `logging/setLevel`) came from, to keep
    one entry per client: the SDK builds a session object per request, but the client's
    `initialize` params (the session's public `client_params`) are one object per connection, set
    once by its handshake. A session with none (no handshake) stands for itself."""
    params = session.client_params
    return params if params is not None else session


def scrubbed_result(result: Any) -> Any:
    """Every tool answer leaves through here: with any key mcp-rl holds (in any of its common
    forms) replaced by `[redacted NAME]` (mcp_rl.redact). Answers without one are returned as
    they are (one search over their JSON)."""
    if not isinstance(result, BaseModel) or not redact.has_secret(result.model_dump_json(by_alias=True)):
        return result
    data = redact.scrub_json(result.model_dump(mode="json", by_alias=True, exclude_none=True))
    return type(result).model_validate(data)
