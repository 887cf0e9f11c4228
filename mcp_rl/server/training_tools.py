"""Tools and resources for training runs: start, check, stop, list; run logs, config, metrics.

Thin adapters over `mcp_rl.supervisor.service`. Runs live outside this server (a detached
supervisor per run), so every answer comes from the registry and the run directory.
"""

from __future__ import annotations

import json
import logging
import threading
from typing import Annotated

import anyio
from mcp.server import MCPServer
from mcp.types import CallToolResult, ResourceLink, TextContent, ToolAnnotations
from pydantic import BaseModel, Field

from mcp_rl.server.app import AppState
from mcp_rl.server.errors import resource_errors, tool_errors
from mcp_rl.supervisor import service
from mcp_rl.supervisor.models import RunList, RunStarted, RunStatus, StopResult

log = logging.getLogger(__name__)

READ_ONLY = ToolAnnotations(read_only_hint=True, open_world_hint=False)
START = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=True)
STOP = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False)

CHECK_STATUS_DOC = """Check a training run: state, per-process status, running time, latest metrics
(step, reward mean, loss), W&B link, log resources, and the cause if it failed.

States: starting, running, completed, failed, stopping, stopped. {limit}"""

RunId = Annotated[str, Field(description="The run_id returned by rl_start_training (see rl_list_runs).")]


def _with_links(model: BaseModel, run_id: str, logs: dict[str, str]) -> CallToolResult:
    """The model as JSON (also as structured content), plus links the agent can read next."""
    links = [
        ResourceLink(type="resource_link", uri=f"rl://runs/{run_id}", name=f"run {run_id}",
                     description="Full status of the run", mime_type="application/json"),
        *(
            ResourceLink(type="resource_link", uri=uri, name=f"{name} log",
                         description=f"Tail of the {name} log (?tail=N for more)", mime_type="text/plain")
            for name, uri in logs.items()
        ),
    ]
    data = model.model_dump(mode="json")
    return CallToolResult(content=[TextContent(type="text", text=model.model_dump_json()), *links], structured_content=data)


def register(mcp: MCPServer, state: AppState) -> None:
    settings = state.settings

    def environments():  # the environment tools' service: the session's selection and edits
        from mcp_rl.environments.service import EnvironmentService

        existing = state.caches.get("environments")
        return existing if existing is not None else EnvironmentService(settings)

    @mcp.tool(annotations=START)
    @tool_errors
    async def rl_start_training() -> Annotated[CallToolResult, RunStarted]:
        """Start a training run with the selected environment and current config.

        WARNING: Training takes hours. The run starts in the background and this returns at once
        with the run_id, the run.yaml path and the log resources; it keeps going if this client
        disconnects or the server restarts. Backend: tinker when TINKER_API_KEY is set, else the
        local CPU backend (override with rl_edit_config('backend', ...)). Before starting: select
        an environment, review rl_get_current_config, and smoke-test with rl_test_inference.
        Then poll rl_check_status(run_id) (rarely: every 30 minutes or so) and stop early with
        rl_stop_training(run_id). Runs, their logs, metrics and checkpoints are kept on disk
        (runs/<run_id> in the state directory) until deleted, so a run_id stays valid.
        """
        started = await anyio.to_thread.run_sync(lambda: service.start_run(settings, environments()))
        return _with_links(started, started.run_id, started.logs)

    interval = settings.status_min_interval_s
    limit = (
        f"Detailed checks of a run still going are limited to one per {interval / 60:g} minutes: "
        "an earlier repeat answers rate_limited=true with next_check_in_seconds and still gives the "
        "state; a run that has ended is always reported at once."
        if interval > 0
        else "Checks are not rate-limited on this server."
    )

    @mcp.tool(annotations=READ_ONLY, description=CHECK_STATUS_DOC.format(limit=limit))
    @tool_errors
    async def rl_check_status(run_id: RunId) -> Annotated[CallToolResult, RunStatus]:
        status = await anyio.to_thread.run_sync(
            lambda: service.run_status(settings, run_id, min_interval_s=settings.status_min_interval_s)
        )
        return _with_links(status, status.run_id, status.logs)

    @mcp.tool(annotations=STOP)
    @tool_errors
    async def rl_stop_training(run_id: RunId) -> StopResult:
        """Stop a training run: ends the environment, then the trainer, then the Atropos API
        (each gently, then forcibly after a grace period) and returns once nothing of the run is
        left. Checkpoints already saved stay available. Stopping a run that already ended does
        nothing and says so.
        """
        return await anyio.to_thread.run_sync(lambda: service.stop_run(settings, run_id))

    @mcp.tool(annotations=READ_ONLY)
    @tool_errors
    async def rl_list_runs() -> RunList:
        """List every training run, newest first, with its state and latest reward mean.

        Runs are kept on disk, so this includes runs started by earlier servers.
        """
        return await anyio.to_thread.run_sync(lambda: service.list_runs(settings))

    # --- resources --------------------------------------------------------------------------
    @mcp.resource(
        "rl://runs", name="runs", title="Training runs", mime_type="application/json",
        description="Every training run, newest first, with its state and latest reward.",
    )
    def runs_resource() -> str:
        return service.list_runs(settings).model_dump_json(indent=2)

    @mcp.resource(
        "rl://runs/{run_id}", name="run_status", title="Run status", mime_type="application/json",
        description="Full status of one training run: state, processes, latest metrics (never rate-limited).",
    )
    @resource_errors
    def run_resource(run_id: str) -> str:
        return service.run_status(settings, run_id).model_dump_json(indent=2)

    @mcp.resource(
        "rl://runs/{run_id}/config", name="run_config", title="Run configuration", mime_type="application/yaml",
        description="The run.yaml a training run's processes use (environment, model and trainer settings).",
    )
    @resource_errors
    def run_config_resource(run_id: str) -> str:
        return service.read_config(settings, run_id)

    @mcp.resource(
        "rl://runs/{run_id}/metrics",
        name="run_metrics",
        title="Run metrics",
        mime_type="application/json",
        description=f"The last {service.DEFAULT_METRICS_TAIL} per-step metrics of a run (metrics.jsonl), oldest first.",
    )
    @resource_errors
    def run_metrics_resource(run_id: str) -> str:
        return json.dumps(service.read_metrics(settings, run_id), indent=1)

    @mcp.resource(
        "rl://runs/{run_id}/logs/{process}{?tail}",
        name="run_log",
        title="Run log",
        mime_type="text/plain",
        description=(
            f"The last lines of a run's log: process is api, trainer, env or supervisor; "
            f"tail defaults to {service.DEFAULT_LOG_TAIL} (max {service.MAX_LOG_TAIL})."
        ),
    )
    @resource_errors
    def run_log_resource(run_id: str, process: str, tail: int = service.DEFAULT_LOG_TAIL) -> str:
        return service.read_log(settings, run_id, process, tail)

    # --- start-up ---------------------------------------------------------------------------
    async def reconcile_runs() -> None:
        # In the background: ending a dead run's leftover processes can take a grace period,
        # and start-up must stay fast. Status calls reconcile the run they look at anyway.
        def work() -> None:
            try:
                service.reconcile(settings)
            except Exception:
                log.exception("reconciling runs failed")

        threading.Thread(target=work, name="reconcile-runs", daemon=True).start()

    state.caches.setdefault("startup_hooks", []).append(reconcile_runs)
