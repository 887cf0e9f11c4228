"""rl_get_results, the run's reward plot as a resource, and resource-change notifications.

Notifications reach both protocol eras: 2026-07-28 clients through the server's subscription bus
(`subscriptions/listen`), 2025-11-25 clients through the legacy `resources/subscribe` handler
registered here (MCPServer registers none; mcp-sdk.md section 9). A background task of the
server's lifespan polls the registry and the runs' metrics files and publishes what changed.
"""

from __future__ import annotations

import base64
import logging
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Annotated, Any

import anyio
from mcp.server import ServerRequestContext
from mcp.server.mcpserver import Context
from mcp.server.subscriptions import ResourceUpdated
from mcp.types import (
    CallToolResult,
    EmptyResult,
    ImageContent,
    ResourceLink,
    SubscribeRequestParams,
    TextContent,
    ToolAnnotations,
    UnsubscribeRequestParams,
)
from pydantic import Field

from mcp_rl.errors import NotFound, clip
from mcp_rl.metrics import store
from mcp_rl.proof.summary import held_out_summary
from mcp_rl.rundir import is_run_id
from mcp_rl.server.budget import CallBudget, Progress, run_within
from mcp_rl.server.errors import resource_errors, tool_errors
from mcp_rl.server.rl_server import RlServer, client_of
from mcp_rl.server.state import AppState
from mcp_rl.supervisor.changes import RunWatch
from mcp_rl.supervisor.registry import Registry
from mcp_rl.supervisor.results import RunResults, get_results, run_dir_of
from mcp_rl.supervisor.rollouts import MAX_PAGE, RolloutPage, rollout_page

log = logging.getLogger(__name__)

RESULTS_ANNOTATIONS = ToolAnnotations(title="Get run results", read_only_hint=True, open_world_hint=True)
ROLLOUTS_ANNOTATIONS = ToolAnnotations(title="Read a run's rollouts", read_only_hint=True, open_world_hint=False)
# Of the tool's time budget, what drawing the plot may use at most before it is left out.
PLOT_SHARE = 0.5
_PLOT_CACHE_SIZE = 16


class PlotCache:
    """PNGs keyed by the metrics files' sizes and times: a plot is redrawn only after a new step."""

    def __init__(self, size: int = _PLOT_CACHE_SIZE) -> None:
        self._size = size
        self._items: OrderedDict[str, tuple[tuple[Any, ...], bytes]] = OrderedDict()
        self._lock = threading.Lock()

    @staticmethod
    def _version(run_dir: Path) -> tuple[Any, ...]:
        out: list[Any] = []
        for name in (store.METRICS_FILE, store.ENV_METRICS_FILE):
            try:
                st = (run_dir / name).stat()
                out += [st.st_size, st.st_mtime_ns]
            except OSError:
                out += [None, None]
        return tuple(out)

    async def png(self, run_id: str, run_dir: Path) -> bytes:
        return await anyio.to_thread.run_sync(self.png_sync, run_id, run_dir)

    def png_sync(self, run_id: str, run_dir: Path) -> bytes:
        """The plot (blocking; matplotlib's first import takes seconds). Thread-safe."""
        # matplotlib: off the server's start-up path
        from mcp_rl.metrics.plot import render_png

        version = self._version(run_dir)
        with self._lock:
            hit = self._items.get(run_id)
            if hit is not None and hit[0] == version:
                self._items.move_to_end(run_id)
                return hit[1]
        held_out = held_out_summary(run_dir)
        data = render_png(
            store.read_step_table(run_dir), f"run {run_id}", held_out.sentence if held_out is not None else None
        )
        with self._lock:
            self._items[run_id] = (version, data)
            while len(self._items) > self._size:
                self._items.popitem(last=False)
        return data


class LegacySubscriptions:
    """Who subscribed to what with `resources/subscribe` (2025-11-25 clients), once per client.

    Held strongly (a per-request session would not outlive its request otherwise); a client that
    has gone away fails its next notification and is forgotten then.
    """

    def __init__(self) -> None:
        self._by_uri: dict[str, list[tuple[Any, Any]]] = {}

    def add(self, uri: str, session: Any) -> None:
        client = client_of(session)
        entries = self._by_uri.setdefault(uri, [])
        if not any(c is client for c, _ in entries):
            entries.append((client, session))

    def remove(self, uri: str, session: Any) -> None:
        client = client_of(session)
        self._by_uri[uri] = [(c, s) for c, s in self._by_uri.get(uri, []) if c is not client]

    def __bool__(self) -> bool:
        return any(self._by_uri.values())

    async def notify(self, uri: str) -> None:
        for _, session in list(self._by_uri.get(uri, [])):
            try:
                await session.send_resource_updated(uri)
            except Exception as exc:  # a closed session: forget it, keep notifying the others
                log.debug("dropping legacy subscription to %s: %r", uri, exc)
                self.remove(uri, session)


def _link(uri: str, name: str, mime_type: str, description: str) -> ResourceLink:
    return ResourceLink(type="resource_link", uri=uri, name=name, mime_type=mime_type, description=description)


def _summary_line(results: RunResults) -> str:
    parts = [f"run {results.run_id}: {results.state}", f"step {results.steps_completed}/{results.num_steps or '?'}"]
    reward = results.metrics.get(store.REWARD_KEY)
    if reward is not None:
        parts.append(
            f"reward/mean final {reward.final:.4g} (step {reward.final_step}), best {reward.best:.4g} (step {reward.best_step})"
        )
    if results.weights.sampler_weights:
        parts.append(f"weights {results.weights.sampler_weights}")
    return "; ".join(parts)


def register(mcp: RlServer, state: AppState) -> None:
    settings = state.settings
    # Per-server: `register` runs once per server and its tools close over these.
    wandb_cache: dict[str, Any] = {}
    plots = PlotCache()
    legacy = LegacySubscriptions()
    bus = state.subscription_bus

    @mcp.tool(title="Get run results", annotations=RESULTS_ANNOTATIONS)
    @tool_errors
    async def rl_get_results(
        ctx: Context,
        run_id: Annotated[str, Field(description="Run id from rl_start_training or rl_list_runs.")],
        include_plot: Annotated[
            bool,
            Field(description="Attach the reward/loss PNG (about 50 kB); false for hosts that cannot show images."),
        ] = True,
    ) -> Annotated[CallToolResult, RunResults]:
        """Results of a training run: is it worth keeping, and where are its weights.

        Answers from the run's own metrics (works with W&B off): state; final and best value of
        reward/mean, train/loss and the environment's accuracy (train/eval percent_correct) with
        the step each came from; a short history (at most 50 steps, always the first and last);
        the weights (last saved sampler weights: a tinker:// URL or a local LoRA folder; the
        resumable checkpoint if any); the W&B run URL when W&B is on. Also returns the reward and
        loss curve as a PNG (include_plot) and links to the logs and full metrics. W&B problems never fail this
        tool: they are listed under `notes`. Works while the run is still going.
        """
        budget = CallBudget(settings.tool_time_budget_s)
        progress = Progress(ctx, budget)
        await progress.report(f"reading run {run_id}'s metrics")
        results = await get_results(settings, run_id, cache=wandb_cache)
        await progress.report(
            "metrics read" + (", W&B looked up" if results.wandb and results.wandb.mode == "online" else "")
        )
        content: list[Any] = [
            TextContent(type="text", text=_summary_line(results)),
            TextContent(type="text", text=results.model_dump_json()),
        ]
        if include_plot:
            # Drawing may not take the rest of the budget: past its share the plot is left out
            # (it is still drawn in the background, so the next call or the resource has it).
            share = budget.part(budget.remaining() * PLOT_SHARE)
            run_dir = Path(results.run_dir)
            drawn, png, _ = await run_within(
                state.jobs,
                f"plot:{run_id}",
                "drawing the reward plot",
                lambda: plots.png_sync(run_id, run_dir),
                share,
                progress,
            )
            if drawn:
                content.append(
                    ImageContent(type="image", data=base64.b64encode(png).decode("ascii"), mime_type="image/png")
                )
            else:
                results.notes.append(
                    f"The plot is still being drawn; read {results.plot_uri} or call rl_get_results again."
                )
                content[1] = TextContent(type="text", text=results.model_dump_json())
        content += [
            _link(results.plot_uri, "reward and loss plot", "image/png", "PNG of reward/mean and train/loss per step"),
            _link(results.metrics_uri, "metrics", "application/json", "Per-step metrics (metrics.jsonl)"),
            _link(f"rl://runs/{run_id}", "run status", "application/json", "State and processes of the run"),
        ]
        for name, uri in results.log_uris.items():
            content.append(_link(uri, f"{name} log", "text/plain", f"Tail of the {name} process log"))
        return CallToolResult(content=content, structured_content=results.model_dump(mode="json"))

    @mcp.tool(title="Read a run's rollouts", annotations=ROLLOUTS_ANNOTATIONS)
    @tool_errors
    async def rl_get_rollouts(
        run_id: Annotated[str, Field(description="Run id from rl_start_training or rl_list_runs.")],
        step: Annotated[
            int | None, Field(ge=1, description="The training step to show (default: the latest with rollouts).")
        ] = None,
        offset: Annotated[int, Field(ge=0, description="First group of the step to return.")] = 0,
        limit: Annotated[int, Field(ge=1, le=MAX_PAGE, description="Groups per page.")] = 2,
    ) -> RolloutPage:
        """What the model said during training: a few groups of each step (the prompt, every answer
        with its reward and the advantage it was trained with), a page at a time.

        Use it to see why rewards are what they are (answers the environment scores wrongly,
        empty or cut-off answers, a prompt the model misreads) and whether groups carry signal
        (`signal` false: every answer got the same reward, nothing was learned from it). Kept for
        local and Tinker runs, bounded (two groups per step, texts clipped). Read-only; also the
        resource rl://runs/{run_id}/rollouts/{step}.
        """
        return await anyio.to_thread.run_sync(lambda: rollout_page(settings, run_id, step, offset, limit))

    @mcp.resource(
        "rl://runs/{run_id}/rollouts/{step}",
        name="run_rollouts",
        title="Rollouts of a training step",
        description="The groups kept of one training step (prompt, answers, rewards, advantages) as JSON; the "
        "tool rl_get_rollouts pages through them.",
        mime_type="application/json",
    )
    @resource_errors
    async def run_rollouts(run_id: str, step: str) -> str:
        if not step.isdigit():
            raise NotFound(f"Step {clip(step)} is not a step number; read rl://runs/{{run_id}}/rollouts/1.")
        page = await anyio.to_thread.run_sync(lambda: rollout_page(settings, run_id, int(step), 0, 10_000))
        return page.model_dump_json()

    @mcp.resource(
        "rl://runs/{run_id}/plot.png",
        name="run_plot",
        title="Reward and loss plot",
        description="PNG of a run's reward/mean (and accuracy) and train/loss per step, from metrics.jsonl.",
        mime_type="image/png",
    )
    @resource_errors
    async def run_plot(run_id: str) -> bytes:
        # Not a run id (too long for a file name, or a path): unknown, before any file is looked at.
        run_dir = (_registry_run_dir(state, run_id) or run_dir_of(settings, run_id)) if is_run_id(run_id) else None
        if run_dir is None or not (run_dir / "run.yaml").exists():
            raise NotFound(f"Unknown run_id {clip(run_id)}; read rl://runs or call rl_list_runs.")
        return await plots.png(run_id, run_dir)

    # --- 2025-11-25 subscriptions (the 2026-07-28 ones are the SDK's listen streams) ------------
    async def on_subscribe(ctx: ServerRequestContext[Any], params: SubscribeRequestParams) -> EmptyResult:
        legacy.add(str(params.uri), ctx.session)
        return EmptyResult()

    async def on_unsubscribe(ctx: ServerRequestContext[Any], params: UnsubscribeRequestParams) -> EmptyResult:
        legacy.remove(str(params.uri), ctx.session)
        return EmptyResult()

    # Routed since the server was built (RlServer.LATE_METHODS), so initialize declares them.
    mcp.set_request_handler("resources/subscribe", on_subscribe)
    mcp.set_request_handler("resources/unsubscribe", on_unsubscribe)

    async def watch_runs() -> None:
        interval = settings.watch_interval_s
        watch = RunWatch(settings)
        while True:
            try:
                changed = await anyio.to_thread.run_sync(watch.poll)
            except Exception as exc:  # a locked or half-created state.db: try again next time
                log.debug("run watch poll failed: %r", exc)
                changed = []
            for uri in changed:
                await bus.publish(ResourceUpdated(uri=uri))
                if legacy:
                    await legacy.notify(uri)
            await anyio.sleep(interval)

    state.background_tasks.append(watch_runs)


def _registry_run_dir(state: AppState, run_id: str) -> Path | None:
    if not state.settings.state_db.exists():
        return None
    record = Registry(state.settings.state_db).get_run(run_id)
    return Path(record.run_dir) if record is not None else None
