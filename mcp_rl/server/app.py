"""Builds the MCP server: one `AppState` per server process, handed to each tool module.

Every tool module has `register(mcp, state)`; it closes over `state` instead of reading globals,
so two servers in one process (tests) never share anything. Imports here stay light: torch,
transformers, atroposlib and wandb are only ever imported by the child processes we start.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
from mcp.server import MCPServer

from mcp_rl import __version__
from mcp_rl.server import (
    completions,
    environment_tools,
    evaluation_tools,
    exploring,
    follow_tools,
    identity,
    inference_tools,
    log_events,
    prompts,
    results_tools,
    schema_cache,
    schema_formats,
    smoke_test_tools,
    strict,
    training_tools,
    weights_tools,
)
from mcp_rl.server.state import AppState
from mcp_rl.settings import Settings

log = logging.getLogger(__name__)

INSTRUCTIONS = """\
mcp-rl runs reinforcement-learning post-training (GRPO-style, LoRA) of language models.
Workflow: rl_list_environments -> rl_select_environment -> rl_get_current_config ->
rl_edit_config (optional) -> rl_test_inference (smoke test, strongly recommended) ->
rl_start_training -> rl_wait_for_run / rl_check_status -> rl_get_results / rl_stop_training.
Every call answers within the server's time budget (45 s by default); work still going then
continues in the background and the answer names the tool that collects it (e.g.
rl_get_test_result for a smoke test). Runs live outside this server: they keep going if the
client disconnects, and any later server sees them (rl_list_runs)."""


def build_server(settings: Settings | None = None) -> MCPServer:
    settings = settings or Settings.from_env()
    state = AppState.for_settings(settings)

    @asynccontextmanager
    async def lifespan(_server: MCPServer) -> AsyncIterator[AppState]:
        settings.ensure_home()
        for note in settings.placeholder_notes():
            log.warning(note)
        for hook in state.startup_hooks:
            await hook()
        # Long-lived work of this server (e.g. watching runs for notifications), ended with it.
        async with anyio.create_task_group() as tasks:
            for task in state.background_tasks:
                tasks.start_soon(task)
            try:
                yield state
            finally:
                tasks.cancel_scope.cancel()

    mcp = MCPServer(
        "mcp-rl",
        title=identity.TITLE,
        description=identity.DESCRIPTION,
        website_url=identity.WEBSITE_URL,
        icons=identity.icons(),
        version=__version__,
        instructions=INSTRUCTIONS,
        lifespan=lifespan,
        subscriptions=state.subscription_bus,
    )

    # Each module owns one area of the surface and closes over `state`. Output schemas kept from
    # an earlier start are reused (deriving them was half of building the server).
    with schema_cache.kept_output_schemas(mcp, settings):
        for module in (
            environment_tools,
            training_tools,
            inference_tools,
            smoke_test_tools,
            follow_tools,
            results_tools,
            evaluation_tools,
            weights_tools,
        ):
            module.register(mcp, state)
    # Run and smoke-test events as log messages for clients that set a level (logging capability).
    log_events.register(mcp, state)
    # Workflows for people (prompts) and argument completions, over the tools registered above.
    prompts.register(mcp, state)
    completions.register(mcp, state)
    # Last: every tool registered above refuses arguments it does not declare.
    strict.make_strict(mcp)
    # No environment selected, an unknown id: answers saying what exists, not tool errors.
    exploring.answer_exploring_calls(mcp, state)
    # Only JSON Schema's own `format` values (pydantic's "path" makes hosts print warnings).
    schema_formats.use_standard_formats(mcp)
    return mcp
