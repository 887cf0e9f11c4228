"""Builds the MCP server: an `RlServer` (server/rl_server.py) and the surface it registers.

Every tool module has `register(mcp, state)`; it closes over `state` instead of reading globals,
so two servers in one process (tests) never share anything. The tool modules, their services and
`AppState` are imported by `register_surface`, which the server runs off the path a host waits on
(on a worker thread of its lifespan, or at the first request that needs it): `build_server`
imports only the SDK and what a kept `tools/list` answer needs. torch, transformers, atroposlib
and wandb are only ever imported by the child processes we start.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from mcp.server.subscriptions import InMemorySubscriptionBus

from mcp_rl import __version__
from mcp_rl.server import identity
from mcp_rl.server.mcp_tasks import TasksExtension
from mcp_rl.server.rl_server import RlServer
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


def build_server(settings: Settings | None = None, after_registration: Callable[[], None] | None = None) -> RlServer:
    """The server; `after_registration` runs once its surface is registered (mcp-rl serve ends
    its fast start there: mcp_rl/fast_start.py)."""
    settings = settings or Settings.from_env()
    bus = InMemorySubscriptionBus()
    tasks = TasksExtension()  # long work as MCP tasks, for clients that declare them
    server = RlServer(
        settings,
        lambda server: register_surface(server, settings, bus),
        after_registration,
        name="mcp-rl",
        title=identity.TITLE,
        description=identity.DESCRIPTION,
        website_url=identity.WEBSITE_URL,
        icons=identity.icons(),
        version=__version__,
        instructions=INSTRUCTIONS,
        subscriptions=bus,
        extensions=[tasks],
    )
    tasks.attach(server)
    return server


def register_surface(mcp: RlServer, settings: Settings, bus: InMemorySubscriptionBus) -> None:
    """Everything the server offers: tools, resources, prompts, completions, log events."""
    # Imported here, not at the top: this is what `build_server` leaves off a host's wait.
    from mcp_rl.server import (
        completions,
        environment_tools,
        evaluation_tools,
        follow_tools,
        inference_tools,
        log_events,
        prompts,
        results_tools,
        scenario_tools,
        smoke_test_tools,
        training_tools,
        weights_tools,
    )
    from mcp_rl.server.state import AppState  # the environments service: the surface's too

    state = AppState.for_settings(settings, bus)
    # Each module owns one area of the surface and closes over `state`.
    for module in (
        environment_tools,
        training_tools,
        inference_tools,
        smoke_test_tools,
        follow_tools,
        results_tools,
        evaluation_tools,
        weights_tools,
        scenario_tools,
    ):
        module.register(mcp, state)
    # Run and smoke-test events as log messages for clients that set a level (logging capability).
    log_events.register(mcp, state)
    # Workflows for people (prompts) and argument completions, over the tools registered above.
    prompts.register(mcp, state)
    completions.register(mcp, state)
    mcp.startup_hooks.extend(state.startup_hooks)
    mcp.background_tasks.extend(state.background_tasks)
