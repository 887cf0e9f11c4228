"""Tools and resources for training runs: start, check, stop, list; run logs, config, metrics.

Thin adapters over `mcp_rl.supervisor.service`. Runs live outside this server (a detached
supervisor per run), so every answer comes from the registry and the run directory.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any

import anyio
from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.types import CallToolResult, ResourceLink, TextContent, ToolAnnotations
from pydantic import BaseModel, Field

from mcp_rl.config.training_cost import estimate_training
from mcp_rl.environments.discovery import task_class_names
from mcp_rl.environments.validate import start_note
from mcp_rl.idempotency import KEY_TTL_S, IdempotencyStore
from mcp_rl.runconfig import RunConfig
from mcp_rl.rundir import CHECKPOINTS_DIR
from mcp_rl.server.budget import CallBudget, Progress, wait_job
from mcp_rl.server.cost_consent import confirm_training_start
from mcp_rl.server.environment_tools import config_revision, selected_spec_ready
from mcp_rl.server.errors import resource_errors, tool_errors
from mcp_rl.server.state import AppState
from mcp_rl.supervisor import service, start_guard, stop_wait, upkeep
from mcp_rl.supervisor.bounded import bounded_latest, bounded_log, bounded_metrics
from mcp_rl.supervisor.models import (
    RunList,
    RunStarted,
    RunStatus,
    StopAnswer,
)
from mcp_rl.supervisor.pace import CheckLimiter
from mcp_rl.supervisor.states import RunState
from mcp_rl.trainer.retention import disk_bytes

# Status reads write nothing: a run whose supervisor died reads as failed at once, and the
# server's own watcher (and every start) records that and ends its leftovers. Hosts that
# auto-approve read-only tools then let an agent poll without asking the person each time.
STATUS_READ = ToolAnnotations(read_only_hint=True, open_world_hint=False)
START = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=True)
STOP = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False)

STATUS_NOTE = (
    "Read-only: a run whose supervisor process died reads as failed (or stopped, if a stop was asked for); "
    "the server records that and ends its leftover processes by itself."
)

CHECK_STATUS_DOC = """Check a training run: state, per-process status, running time, latest metrics
(step, reward mean, loss), W&B link, log resources, and the cause if it failed.

States: starting, running, completed, failed, stopping, stopped. {limit} To wait for the next
step or the end without polling, use rl_wait_for_run; to follow a log, rl_read_log.
{note}"""

MAX_RUNS_PAGE = 100


class StartAnswer(RunStarted):
    """rl_start_training's answer: the run, and exactly what it trains; or, with started=false,
    why nothing was started (a stale expected_revision: an answer, not an error; see
    docs/design-notes.md, "Refusals are answers")."""

    started: bool = Field(True, description="False: refused (see `refused`); nothing was started.")
    refused: str | None = Field(None, description="Why nothing was started, and what to call instead.")
    # Empty when nothing was started.
    run_id: str = ""
    status: RunState | None = None  # type: ignore[assignment]
    environment: str = ""
    backend: str = ""
    base_model: str = ""
    num_steps: int = 0
    config_path: str = ""
    config: dict[str, Any] = Field(default_factory=dict, description="The environment section of run.yaml.")
    logs: dict[str, str] = Field(default_factory=dict, description="Log resources by process.")
    status_resource: str = ""

    trainer: dict[str, Any] = Field(
        default_factory=dict,
        description="The trainer section of run.yaml: backend, base_model, num_steps, batch_size, group_size, "
        "lora_rank, learning_rate, ...",
    )
    revision: str = Field(description="The config revision this run was built from (see rl_edit_config).")
    notes: list[str] = Field(default_factory=list, description="What to know about this start (e.g. not validated).")
    idempotency_key: str | None = None
    reused: bool = Field(
        False, description="True: this key already started this run (within a day); nothing new started."
    )
    estimated_cost: dict[str, Any] | None = Field(
        None,
        description="Estimated tokens and USD per step and for the run (low / expected / high), with what drives "
        "them; $0 on the local backend. The run's metrics then report what each step cost (estimated).",
    )


class RunPage(RunList):
    total: int = Field(description="Runs in all pages.")
    offset: int
    next_offset: int | None = Field(None, description="Pass as offset for the next page; None on the last page.")


RunId = Annotated[str, Field(description="The run_id returned by rl_start_training (see rl_list_runs).")]


class StartRefused(Exception):
    """Nothing was started, for the reason given (answered with started=false, not an error)."""

    def __init__(self, message: str, revision: str) -> None:
        super().__init__(message)
        self.revision = revision


class StaleRevision(StartRefused):
    """The config changed since the revision the agent reviewed; nothing was started."""


def _with_links(model: BaseModel, run_id: str, logs: dict[str, str]) -> CallToolResult:
    """The model as JSON (also as structured content), plus links the agent can read next."""
    links = [
        ResourceLink(
            type="resource_link",
            uri=f"rl://runs/{run_id}",
            name=f"run {run_id}",
            description="Full status of the run",
            mime_type="application/json",
        ),
        *(
            ResourceLink(
                type="resource_link",
                uri=uri,
                name=f"{name} log",
                description=f"Tail of the {name} log (?tail=N for more)",
                mime_type="text/plain",
            )
            for name, uri in logs.items()
        ),
    ]
    data = model.model_dump(mode="json")
    return CallToolResult(
        content=[TextContent(type="text", text=model.model_dump_json()), *links], structured_content=data
    )


def _start_answer(started: RunStarted, revision: str, key: str | None) -> StartAnswer:
    trainer = RunConfig.load(Path(started.config_path)).trainer
    answer = StartAnswer(
        **started.model_dump(),
        trainer=trainer.model_dump(mode="json", exclude={"wandb"}),
        revision=revision,
        idempotency_key=key,
    )
    answer.message = (
        f"Training {started.environment} ({trainer.backend} backend, model {trainer.base_model}): {trainer.num_steps} "
        f"steps of {trainer.batch_size} sequences in groups of {trainer.group_size}, LoRA rank {trainer.lora_rank}, "
        f"learning rate {trainer.learning_rate:g}; config revision {revision}, written to {started.config_path}. "
        + started.message
    )
    if key is not None:
        answer.message += f" Retrying with idempotency_key {key!r} within {KEY_TTL_S / 3600:.0f} h returns this run."
    return answer


def register(mcp: MCPServer, state: AppState) -> None:
    settings = state.settings

    def environments():  # the environment tools' service: the session's selection and edits
        return state.environments

    budget_s = settings.tool_time_budget_s
    jobs = state.jobs
    idempotency = IdempotencyStore(settings.home / "idempotency")

    @mcp.tool(title="Start a training run", annotations=START)
    @tool_errors
    async def rl_start_training(
        ctx: Context,
        idempotency_key: Annotated[
            str | None,
            Field(
                description="Any unique string (e.g. a UUID) for this start. A retry with the same key within a "
                "day returns the run it already started instead of starting another.",
                max_length=200,
            ),
        ] = None,
        expected_revision: Annotated[
            str | None,
            Field(
                description="The config revision you reviewed (from rl_edit_config or rl_get_current_config): "
                "the start is refused if the config has changed since."
            ),
        ] = None,
        allow_concurrent: Annotated[
            bool,
            Field(
                description="Start a local run even while another local run trains on this machine (both then "
                "share its cores). Tinker runs never need it."
            ),
        ] = False,
        force: Annotated[
            bool,
            Field(
                description="Start even though the last smoke test of this environment and config failed, or the "
                "task's last validation (of the file as it is now) found problems."
            ),
        ] = False,
    ) -> Annotated[CallToolResult, StartAnswer]:
        """Start a training run with the selected environment and current config.

        WARNING: Training takes hours. The run starts in the background and this returns at once
        with the run_id, the run.yaml path and the log resources; it keeps going if this client
        disconnects or the server restarts. Backend: tinker when TINKER_API_KEY is set, else the
        local CPU backend (override with rl_edit_config('backend', ...)). Before starting: select
        an environment, review rl_get_current_config, and smoke-test with rl_test_inference.
        Run options (total_steps, batch_size, ...) are set with rl_edit_config, not here.
        Cost: the answer's estimated_cost gives the run's estimated USD (local backend: $0). A
        Tinker run estimated above the confirmation threshold (default $5) without a cap is
        refused with the estimate and the rl_edit_config("max_cost_usd", X) call that accepts
        it (or the person is asked, when the client supports elicitation): show the person the
        estimate before setting a cap. A capped run ends as stopped before it would pass the cap.
        Pass an idempotency_key so that a retry (e.g. after a client timeout) cannot start a
        second run, and expected_revision to train exactly the config you reviewed. A local start
        while another local run trains here, or of an environment and config whose last smoke
        test failed, answers started=false naming it and the call that starts anyway
        (allow_concurrent=true, force=true).
        Then wait with rl_wait_for_run(run_id) or poll rl_check_status(run_id) (rarely), follow
        logs with rl_read_log, and stop early with rl_stop_training(run_id). Runs, their logs,
        metrics and checkpoints are kept on disk (runs/<run_id> in the state directory) until
        deleted, so a run_id stays valid.
        """
        environments_service = environments()
        budget = CallBudget(budget_s)
        await selected_spec_ready(jobs, environments_service, budget, Progress(ctx, budget), "rl_start_training")
        # Paid work above the threshold without a cap needs a yes (asked, or refused with the call
        # that accepts it); nothing is started or changed before it.
        granted = await confirm_training_start(ctx, settings, environments_service, budget.remaining())

        def start() -> dict[str, Any]:
            session = environments_service.store.read()
            revision = config_revision(session)
            if expected_revision is not None and expected_revision != revision:
                raise StaleRevision(
                    f"The config changed since revision {expected_revision!r} (it is now {revision!r}): another client "
                    "or call edited or re-selected it. Nothing was started. Review rl_get_current_config, then call "
                    f"rl_start_training(expected_revision={revision!r}).",
                    revision,
                )
            refused = start_guard.refusal(
                settings, service.registry_for(settings), environments_service, allow_concurrent, force
            )
            if refused is not None:
                raise StartRefused(refused, revision)
            started = service.start_run(settings, environments_service)
            answer = _start_answer(started, revision, idempotency_key)
            estimate = estimate_training(settings, RunConfig.load(Path(started.config_path)))
            answer.estimated_cost = estimate.as_dict()
            answer.message += " " + estimate.summary()
            if granted is not None:
                answer.message += " The person said yes to starting it without a cost cap."
            ref = session.environment
            if ref is not None and ref.class_name in task_class_names(ref.file_path):
                note = start_note(settings, ref.file_path, ref.name)
                if note is not None:
                    answer.notes.append(note)
            return answer.model_dump(mode="json")

        # On a worker thread that is never abandoned: if the host cancels this call, the run and
        # its idempotency record are still written, so the retry finds them.
        try:
            if idempotency_key is None:
                data, reused = await anyio.to_thread.run_sync(start), False
            else:
                data, reused = await anyio.to_thread.run_sync(lambda: idempotency.once("start", idempotency_key, start))
        except StartRefused as stale:
            # An answer, not an error: hosts such as Hermes count every error toward a breaker.
            refusal = StartAnswer(
                started=False, refused=str(stale), message=str(stale), revision=stale.revision, idempotency_key=None
            )
            return CallToolResult(
                content=[TextContent(type="text", text=refusal.model_dump_json(exclude_defaults=True))],
                structured_content=refusal.model_dump(mode="json"),
            )
        answer = StartAnswer.model_validate(data)
        if reused:
            current = await anyio.to_thread.run_sync(lambda: service.run_status(settings, answer.run_id))
            answer = answer.model_copy(
                update={
                    "reused": True,
                    "status": current.status,
                    "message": (
                        f"Already started: idempotency_key {idempotency_key!r} started run {answer.run_id} "
                        f"(now {current.status}); no new run. {answer.message}"
                    ),
                }
            )
        return _with_links(answer, answer.run_id, answer.logs)

    interval = settings.status_min_interval_s
    limiter = CheckLimiter(interval)
    limit = (
        "Detailed checks of a run still going are limited to about ten per run (a tenth of its expected "
        f"length, at least 30 s and at most {interval / 60:g} min): an earlier repeat answers rate_limited=true "
        "with next_check_in_seconds and still gives the state, step, reward and loss (only the details are "
        "left out); a run that has ended is never limited."
        if interval > 0
        else "Checks are not rate-limited on this server."
    )

    @mcp.tool(
        title="Check a training run",
        annotations=STATUS_READ,
        description=CHECK_STATUS_DOC.format(limit=limit, note=STATUS_NOTE),
    )
    @tool_errors
    async def rl_check_status(run_id: RunId) -> Annotated[CallToolResult, RunStatus]:
        def check() -> RunStatus:
            status = service.run_status(settings, run_id, repair=False)
            limited = limiter.admit(status, time.monotonic())
            if limited is not None:
                # The limit spares the agent's context, not information: the headline numbers
                # come from the run's own files and cost nothing.
                return service.short_status(status, *limited)
            return bounded_latest(status)

        status = await anyio.to_thread.run_sync(check)
        used = await anyio.to_thread.run_sync(lambda: disk_bytes(settings.runs_dir / status.run_id / CHECKPOINTS_DIR))
        status = status.model_copy(update={"checkpoints_disk_mb": round(used / 1e6, 1)})
        return _with_links(status, status.run_id, status.logs)

    @mcp.tool(title="Stop a training run", annotations=STOP)
    @tool_errors
    async def rl_stop_training(ctx: Context, run_id: RunId) -> StopAnswer:
        """Stop a training run: ends the environment, then the trainer (which saves a checkpoint
        first), then the Atropos API, each gently, then forcibly after a grace period.
        Checkpoints already saved stay available. Stopping a run that already ended does nothing
        and says so. Answers within the server's time budget: if the processes are still ending
        then, the answer has in_progress=true, the stop goes on in the background, and calling
        rl_stop_training(run_id) again waits for it (rl_wait_for_run(run_id) works too).
        """
        budget = CallBudget(budget_s)
        progress = Progress(ctx, budget)
        before = await anyio.to_thread.run_sync(lambda: service.run_status(settings, run_id))
        if not stop_wait.stop_underway(before):
            # stop_run answers within the budget it is given (a detached stopper finishes what
            # does not fit); the job is the safety net should it ever overrun.
            job = jobs.start(
                f"stop:{run_id}",
                f"stopping run {run_id}",
                lambda: service.stop_run(settings, run_id, budget_s=budget.remaining()),
            )
            if await wait_job(
                job, budget, progress, lambda: stop_wait.stop_progress(settings, run_id, job.running_for())
            ):
                jobs.forget(job)
                return stop_wait.stop_answer(settings, job.outcome(), job.running_for())
        return await stop_wait.wait_for_stop(settings, run_id, budget.remaining(), progress.report)

    @mcp.tool(title="List training runs", annotations=STATUS_READ)
    @tool_errors
    async def rl_list_runs(
        offset: Annotated[int, Field(ge=0, description="First run to return (newest first).")] = 0,
        limit: Annotated[int, Field(ge=1, le=MAX_RUNS_PAGE, description="Runs per page.")] = 20,
    ) -> RunPage:
        """List training runs, newest first, with state, step and latest reward mean, a page at a time.

        Runs are kept on disk, so this includes runs started by earlier servers. `next_offset`
        gives the next page. Read-only: runs whose supervisor died read as failed (the server
        records that by itself).
        """
        every = await anyio.to_thread.run_sync(lambda: service.list_runs(settings, repair=False))
        page = every.runs[offset : offset + limit]
        total = len(every.runs)
        return RunPage(
            runs=page,
            count=len(page),
            notes=every.notes,
            total=total,
            offset=offset,
            next_offset=offset + limit if offset + limit < total else None,
        )

    # --- resources --------------------------------------------------------------------------
    @mcp.resource(
        "rl://runs",
        name="runs",
        title="Training runs",
        mime_type="application/json",
        description="Every training run, newest first, with its state and latest reward.",
    )
    def runs_resource() -> str:
        return service.list_runs(settings, repair=False).model_dump_json(indent=2)

    @mcp.resource(
        "rl://runs/{run_id}",
        name="run_status",
        title="Run status",
        mime_type="application/json",
        description="Full status of one training run: state, processes, latest metrics (never rate-limited).",
    )
    @resource_errors
    def run_resource(run_id: str) -> str:
        return bounded_latest(service.run_status(settings, run_id, repair=False)).model_dump_json(indent=2)

    @mcp.resource(
        "rl://runs/{run_id}/config",
        name="run_config",
        title="Run configuration",
        mime_type="application/yaml",
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
        return bounded_metrics(service.read_metrics(settings, run_id))

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
        return bounded_log(service.read_log(settings, run_id, process, tail), run_id, process)

    # --- start-up and the repair of dead runs (mcp_rl.supervisor.upkeep) ---------------------
    async def reconcile_runs() -> None:
        upkeep.reconcile_in_background(settings)

    async def repair_runs() -> None:
        await upkeep.repair_dead_runs_forever(settings)

    state.startup_hooks.append(reconcile_runs)
    state.background_tasks.append(repair_runs)
