"""One short real training run, made once per test session and read by every end-to-end test
that only reads a completed run (its status, resources, results, events).

Made the way an agent makes one: a real stdio client (the 2025-11-25 protocol, as today's
hosts speak it) selects `arithmetic`, shortens the run, starts it, subscribes to it and polls
rl_check_status until it completes. What only that client could see (the answer of
rl_start_training, the early rl_get_results, the statuses on the way, the resource-updated
notifications) is kept here for the tests; everything else they read with their own client.
"""

from __future__ import annotations

import contextlib
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
from mcp import Client
from mcp.types import ResourceUpdatedNotification

from mcp_rl.settings import Settings
from mcp_rl.supervisor import service
from tests.conftest import make_env, stdio_params
from tests.kit.mcp import SHORT_RUN, ok
from tests.kit.wait import WaitTimeout, wait_for_async

RUN_DEADLINE_S = 600.0
# How long after completing the run the subscribed client may still wait for its notification.
NOTIFY_DEADLINE_S = 10.0


@dataclass
class CompletedRun:
    home: Path
    model: Path
    run_id: str = ""
    started: dict[str, Any] = field(default_factory=dict)  # rl_start_training's answer
    early_results: tuple[bool, str] = (False, "")  # rl_get_results while it ran: (is_error, text)
    statuses: list[str] = field(default_factory=list)  # rl_check_status on the way, in order
    updates: list[str] = field(default_factory=list)  # resource-updated URIs the client heard

    def env(self, **extra: str) -> dict[str, str]:
        return make_env(self.home, MCP_RL_MODEL=str(self.model), **extra)

    def params(self, **extra: str) -> Any:
        return stdio_params(self.home, MCP_RL_MODEL=str(self.model), **extra)

    @property
    def uri(self) -> str:
        return f"rl://runs/{self.run_id}"


async def _make(run: CompletedRun) -> None:
    async def on_message(message: Any) -> None:
        message = getattr(message, "root", message)
        if isinstance(message, ResourceUpdatedNotification):
            run.updates.append(str(message.params.uri))

    params = run.params(MCP_RL_WATCH_INTERVAL="0.5")
    async with Client(params, mode="legacy", message_handler=on_message) as client:
        await ok(client, "rl_select_environment", {"name": "arithmetic"})
        for name, value in SHORT_RUN.items():
            await ok(client, "rl_edit_config", {"field": name, "value": value})
        run.started = await ok(client, "rl_start_training")
        run.run_id = run.started["run_id"]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the 2025-11-25 way to subscribe
            await client.subscribe_resource(run.uri)
        early = await client.call_tool("rl_get_results", {"run_id": run.run_id})
        run.early_results = (early.is_error, early.content[0].text if early.content else "")

        async def ended() -> bool:
            status = (await ok(client, "rl_check_status", {"run_id": run.run_id}))["status"]
            if not run.statuses or run.statuses[-1] != status:
                run.statuses.append(status)
            return status in ("completed", "failed", "stopped")

        async def heard() -> bool:
            return run.uri in run.updates

        # Whatever its end: the tests that read the run say what they expected of it.
        with contextlib.suppress(WaitTimeout):
            await wait_for_async(ended, RUN_DEADLINE_S, "the shared run to end", interval=0.5)
        # The subscribed client hears the end too: wait for it while the session is open.
        with contextlib.suppress(WaitTimeout):
            await wait_for_async(heard, NOTIFY_DEADLINE_S, "the end's notification")


def make_completed_run(home: Path, model: Path) -> CompletedRun:
    """Make the run (whatever its end: the tests say what they expected of it)."""
    run = CompletedRun(home=home, model=model)
    try:
        anyio.run(_make, run)
    finally:
        # A run the client left unfinished (a failure on the way) must not train on in the background.
        settings = Settings.from_env(run.env())
        record = service.registry_for(settings).get_run(run.run_id) if run.run_id else None
        if record is not None and record.active:
            service.stop_run(settings, run.run_id)
    return run
