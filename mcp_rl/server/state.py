"""What the tools of one server share: `AppState`, built once per server by `app.register_surface`.

Every field is named and typed; tool modules receive the state in `register(mcp, state)` and
close over it, so two servers in one process (tests) never share anything. This module imports
no tool module, so the tool modules can import it without a cycle.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mcp.server.subscriptions import InMemorySubscriptionBus

from mcp_rl.config.environment_service import EnvironmentService
from mcp_rl.server.budget import Jobs
from mcp_rl.server.rl_server import LifespanWork
from mcp_rl.settings import Settings


@dataclass
class AppState:
    settings: Settings
    # The selected environment, its edits and the introspection worker (one per server).
    environments: EnvironmentService
    # Resource-change events for 2026-07-28 clients (subscriptions/listen); the run watcher
    # publishes on it.
    subscription_bus: InMemorySubscriptionBus = field(default_factory=InMemorySubscriptionBus)
    # Blocking work that outlives a tool call's time budget, joined or collected by later calls.
    jobs: Jobs = field(default_factory=Jobs)
    # Awaited once when the server starts (e.g. reconciling runs whose supervisor died).
    startup_hooks: list[LifespanWork] = field(default_factory=list)
    # Run for the server's lifetime and cancelled when it stops (e.g. the run watcher).
    background_tasks: list[LifespanWork] = field(default_factory=list)

    @classmethod
    def for_settings(cls, settings: Settings, bus: InMemorySubscriptionBus | None = None) -> AppState:
        return cls(
            settings=settings,
            environments=EnvironmentService(settings),
            subscription_bus=bus if bus is not None else InMemorySubscriptionBus(),
        )
