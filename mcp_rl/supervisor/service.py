"""The run service: what the MCP tools and the CLI call. No MCP types here.

Everything is answered from local state (state.db and the run directory) so status calls stay
fast; the only blocking call is `stop_run`, which waits (with a deadline) until nothing of the run
is left.
"""

from __future__ import annotations

import json
import logging
import signal
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psutil

from mcp_rl import processes
from mcp_rl.atomic import write_text_atomic
from mcp_rl.config import RunOptions, Session, build_run_config, resolve_run_options
from mcp_rl.environments.service import EnvironmentService
from mcp_rl.errors import DamagedState, LaunchError, NotFound, UnknownId, UserError, clip
from mcp_rl.evaluation.held_out_note import held_out_note
from mcp_rl.evaluation.summary import held_out_summary
from mcp_rl.metrics import store
from mcp_rl.metrics.signal import WINDOW_STEPS as SIGNAL_WINDOW_STEPS
from mcp_rl.metrics.signal import learning_signal, with_held_out
from mcp_rl.ports import port_is_free
from mcp_rl.runconfig import RunConfig
from mcp_rl.rundir import (
    COST_STEP_USD_KEY,
    COST_TOTAL_USD_KEY,
    ENV_HEALTH_FILE,
    ENV_METRICS_FILE,
    EVAL_PERCENT_CORRECT_KEY,
    LOGS_DIR,
    LOSS_KEY,
    METRICS_FILE,
    PERCENT_CORRECT_KEY,
    REWARD_KEY,
    RUN_FILE,
    STEP_KEY,
    TIME_KEY,
    is_run_id,
    read_env_health,
    read_jsonl_head,
    read_jsonl_tail,
)
from mcp_rl.settings import Settings
from mcp_rl.supervisor.launchers import (
    JOB_STOP_MARGIN_S,
    SUBMISSION_FILE,
    ClusterLauncher,
    JobState,
    Resources,
    Submission,
    launcher_for,
    supervisor_python,
)
from mcp_rl.supervisor.models import (
    EnvironmentErrors,
    ProcessStatus,
    RunList,
    RunMetrics,
    RunStarted,
    RunStatus,
    RunSummary,
    StopResult,
    log_uri,
)
from mcp_rl.supervisor.reconcile import (
    end_leftovers,
    job_of,
    launch_stopper,
    observe,
    reconcile,
    refresh,
    repair_dead_runs,
)
from mcp_rl.supervisor.registry import ProcessRecord, Registry, RunRecord, registry_for
from mcp_rl.supervisor.states import (
    LOG_NAMES,
    PROCESS_NAMES,
    STOP_REQUESTED_CAUSE,
    TERMINAL_STATES,
    ProcState,
    RunState,
    run_marker,
)
from mcp_rl.supervisor.supervisor import Policy
from mcp_rl.supervisor.tail import last_json_line, tail_lines

if TYPE_CHECKING:
    from mcp_rl.environments.service import EnvironmentService

log = logging.getLogger(__name__)

__all__ = [
    "list_runs",
    "read_config",
    "read_log",
    "read_metrics",
    "reconcile",
    "registry_for",
    "repair_dead_runs",
    "run_status",
    "start_run",
    "stop_run",
]

DEFAULT_LOG_TAIL = 200
MAX_LOG_TAIL = 5000
DEFAULT_METRICS_TAIL = 100
# Kept back from the tool time budget to build and send the stop answer.
STOP_ANSWER_MARGIN_S = 3.0


def _get_run(registry: Registry, run_id: str) -> RunRecord:
    run = registry.get_run(run_id) if is_run_id(run_id) else None
    if run is None:
        raise UnknownId(
            f"Unknown run_id {clip(run_id)}. Call rl_list_runs to see the runs that exist.", "run_id", run_id
        )
    return run


# --- start ---------------------------------------------------------------------------------
def _with_start_checkpoint(settings: Settings, session: Session, config: RunConfig) -> RunConfig:
    """The run bound to the earlier checkpoint its `start_from` option names (refused in words when
    that run trained another model or rank, or has no resumable checkpoint there)."""
    options, _ = resolve_run_options(settings, session.run_options, session.environment)
    if not options.start_from:
        return config
    from mcp_rl.weights.checkpoints import resolve_init  # only runs that start from a checkpoint need it

    run_id, _, step = options.start_from.partition("@")
    t = config.trainer
    path = resolve_init(settings, run_id, int(step) if step else None, t.base_model, t.lora_rank)
    return config.model_copy(update={"trainer": t.model_copy(update={"init_from": path})})


def start_run(settings: Settings, environments: EnvironmentService | None = None) -> RunStarted:
    """Validate the session's environment and config, write run.yaml, launch a supervisor.

    Returns at once; the supervisor brings the processes up in the background.
    """
    environments = environments or EnvironmentService(settings)
    session, spec = environments.selected()  # raises if nothing is selected or the file is gone
    registry = registry_for(settings)
    run_id = _new_run_id(registry)
    config = build_run_config(settings, session, spec, run_id)
    config = _with_start_checkpoint(settings, session, config)
    _validate(config, settings)
    options, _ = resolve_run_options(settings, session.run_options, session.environment)
    run_dir = config.paths.run_dir
    # A cluster job is checked with its scheduler before anything is written.
    cluster = _prepare_job(settings, options, run_id, run_dir)

    config.paths.logs_dir.mkdir(parents=True, exist_ok=True)
    config_path = run_dir / RUN_FILE
    config.dump(config_path)

    now = time.time()
    wandb = config.trainer.wandb
    registry.create_run(
        RunRecord(
            run_id=run_id,
            environment=config.environment.name,
            backend=config.trainer.backend,
            state=RunState.STARTING,
            created_at=now,
            updated_at=now,
            run_dir=str(run_dir),
            config_path=str(config_path),
            wandb_project=wandb.project if wandb.enabled else None,
            wandb_run_name=_wandb_run_name(config),
            launcher=options.launcher,
            job_address=cluster[0].address if cluster else None,
        ),
        cause="rl_start_training",
    )
    for name in PROCESS_NAMES:
        registry.set_process(run_id, name, state=ProcState.PENDING, log_path=str(config.paths.logs_dir / f"{name}.log"))
    submission = None
    if cluster is None:
        _launch_supervisor(settings, registry, run_id, run_dir)
    else:
        submission = _submit_job(settings, registry, run_id, run_dir, *cluster)

    logs = {name: log_uri(run_id, name) for name in LOG_NAMES}
    return RunStarted(
        run_id=run_id,
        status=RunState.STARTING,
        environment=config.environment.name,
        backend=config.trainer.backend,
        base_model=config.trainer.base_model,
        num_steps=config.trainer.num_steps,
        config_path=str(config_path),
        config=config.env,
        wandb_project=wandb.project if wandb.enabled else None,
        wandb_run_name=_wandb_run_name(config),
        logs=logs,
        status_resource=f"rl://runs/{run_id}",
        launcher=options.launcher,
        job_id=submission.job_id if submission else None,
        submission=submission,
        message=(
            f"Run {run_id} is starting in the background ({config.trainer.backend} backend, "
            f"{config.trainer.num_steps} steps"
            + (f", {submission.launcher} job {submission.job_id}" if submission else "")
            + "): Atropos API, then trainer, then environment. "
            f"It keeps going if this client disconnects. Poll rl_check_status('{run_id}'); "
            f"stop with rl_stop_training('{run_id}')."
        ),
    )


def _new_run_id(registry: Registry) -> str:
    while True:
        run_id = uuid.uuid4().hex[:8]
        if registry.get_run(run_id) is None:
            return run_id


def _wandb_run_name(config: RunConfig) -> str | None:
    name = config.env.get("wandb_name")
    return str(name) if name else None


def _validate(config: RunConfig, settings: Settings) -> None:
    env_file = config.environment.file_path
    if not Path(env_file).is_file():
        raise UserError(
            f"The environment file {env_file} no longer exists. Call rl_list_environments and rl_select_environment again."
        )
    trainer = config.trainer
    if trainer.batch_size % trainer.group_size != 0:
        raise UserError(
            f"batch_size ({trainer.batch_size}) must be a multiple of group_size ({trainer.group_size}); "
            "fix it with rl_edit_config."
        )
    # run.yaml is read by three processes and kept on disk: a secret must never be in it.
    text = config.model_dump_json()
    for secret in (settings.tinker_api_key, settings.wandb_api_key, settings.openrouter_api_key):
        if secret is not None and secret.get_secret_value() and secret.get_secret_value() in text:
            raise UserError("The run config contains an API key; keys are taken from the environment only.")


def _prepare_job(
    settings: Settings, options: RunOptions, run_id: str, run_dir: Path
) -> tuple[ClusterLauncher, Submission] | None:
    """For a cluster launcher: its checks (UserError naming the option) and the exact submission."""
    if options.launcher == "local":
        for name in ("gpus", "partition", "account", "time_limit_minutes", "ray_address", "cluster_venv"):
            if getattr(options, name):
                raise UserError(
                    f"Run option {name} is for cluster jobs but launcher is 'local'. Set launcher to slurm or ray, "
                    f"or clear it with rl_edit_config('{name}', null)."
                )
        return None
    resources = Resources(
        gpus=options.gpus,
        partition=options.partition,
        account=options.account,
        time_limit_minutes=options.time_limit_minutes,
        ray_address=options.ray_address,
        cluster_venv=options.cluster_venv,
    )
    python = supervisor_python(resources)
    if not Path(python).is_file():
        raise UserError(
            f"The job would run {python}, which does not exist here: cluster jobs need mcp-rl at the same path on "
            "the cluster's shared filesystem; set cluster_venv to the venv that has it."
        )
    launcher = launcher_for(options.launcher, options.ray_address)
    launcher.check(resources)
    policy = Policy.from_settings(settings)
    submission = launcher.prepare(run_id, run_dir, resources, grace_s=policy.total_stop_s() + JOB_STOP_MARGIN_S)
    launcher.dry_run(submission, settings.child_env())
    return launcher, submission


def _submit_job(
    settings: Settings,
    registry: Registry,
    run_id: str,
    run_dir: Path,
    launcher: ClusterLauncher,
    submission: Submission,
) -> Submission:
    try:
        job_id = launcher.submit(submission, run_dir, settings.child_env())
    except LaunchError as exc:
        registry.transition(run_id, RunState.FAILED, f"the {launcher.name} job could not be submitted: {exc}")
        raise
    registry.update_run(run_id, job_id=job_id)
    registry.record_event(run_id, "run", "submitted", f"{launcher.name} job {job_id}")
    # Written down in the run folder: a registry rebuilt from the folders finds the job again.
    submission = submission.model_copy(update={"job_id": job_id, "address": launcher.address})
    write_text_atomic(run_dir / SUBMISSION_FILE, submission.model_dump_json(indent=2))
    return submission


def _launch_supervisor(settings: Settings, registry: Registry, run_id: str, run_dir: Path) -> None:
    argv = [sys.executable, "-m", "mcp_rl.supervisor", "--run-dir", str(run_dir)]
    try:
        popen = processes.spawn(
            argv,
            run_dir / LOGS_DIR / "supervisor.log",
            settings.child_env(),
            cwd=run_dir,
            marker=run_marker(str(run_dir)),
        )
    except OSError as exc:
        registry.transition(run_id, RunState.FAILED, f"could not start the run supervisor: {exc}")
        raise LaunchError(f"could not start the run supervisor: {exc}") from exc
    identity = processes.identify(popen.pid)
    registry.update_run(
        run_id, supervisor_pid=popen.pid, supervisor_create_time=identity.create_time if identity else None
    )
    # The supervisor lives on after this server; reap it if it ends first, so no zombie is left.
    threading.Thread(target=popen.wait, name=f"reap-supervisor-{run_id}", daemon=True).start()


# --- status --------------------------------------------------------------------------------
def run_status(settings: Settings, run_id: str, repair: bool = True) -> RunStatus:
    """The state of one run from local state. A run whose supervisor died reads as failed either
    way; with `repair` the end is also recorded (and its leftovers ended by a detached stopper),
    without it nothing is written (the MCP server's status tools: its watcher repairs)."""
    registry = registry_for(settings)
    run = _get_run(registry, run_id)
    run = refresh(registry, run, settings) if repair else observe(run, registry)
    return _full_status(registry, run, time.time())


def _running_minutes(run: RunRecord, now: float) -> float:
    return round(((run.ended_at or now) - run.created_at) / 60.0, 2)


def _base_message(run: RunRecord) -> str:
    messages = {
        RunState.STARTING: "Starting: the API, trainer and environment come up in order.",
        RunState.RUNNING: "Training. Metrics update after every step.",
        RunState.COMPLETED: "Completed: the trainer finished its last step. Use rl_get_results for metrics and weights.",
        RunState.FAILED: "Failed: see 'error' and the log resources.",
        RunState.STOPPING: "Stopping on request.",
        RunState.STOPPED: "Stopped on request.",
    }
    return messages[run.state]


def _identity(run: RunRecord, now: float) -> dict[str, Any]:
    """What every status answer carries, rate-limited or not."""
    return {
        "run_id": run.run_id,
        "status": run.state,
        "environment": run.environment,
        "backend": run.backend,
        "running_time_minutes": _running_minutes(run, now),
        "cause": run.cause,
        "error": run.cause if run.state == RunState.FAILED else None,
    }


def short_status(full: RunStatus, wait: float, why: str) -> RunStatus:
    """A rate-limited answer: the identity and headline numbers of `full`, not its details."""
    metrics = full.metrics.model_copy(update={"latest": {}}) if full.metrics else None
    return RunStatus(
        run_id=full.run_id,
        status=full.status,
        environment=full.environment,
        backend=full.backend,
        running_time_minutes=full.running_time_minutes,
        cause=full.cause,
        error=full.error,
        metrics=metrics,
        held_out=full.held_out,
        environment_errors=full.environment_errors,
        learning_signal=full.learning_signal,
        held_out_note=full.held_out_note,
        rate_limited=True,
        next_check_in_seconds=round(wait, 1),
        wandb_project=full.wandb_project,
        wandb_run_name=full.wandb_run_name,
        created_at=full.created_at,
        ended_at=full.ended_at,
        message=(
            f"Run {full.run_id} is {full.status}. Detailed checks are limited to {why}: check again in "
            f"{_in_words(wait)} (a run that ends is reported at once), or wait with rl_wait_for_run. "
            f"Logs stay readable at rl://runs/{full.run_id}/logs/trainer."
        ),
    )


def _in_words(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} min"


def _full_status(registry: Registry, run: RunRecord, now: float) -> RunStatus:
    run_dir = Path(run.run_dir)
    status = store.trainer_status_fields(run_dir)  # well-typed values only: a damaged file must not fail the call
    metrics = _metrics(run_dir / METRICS_FILE, status)
    procs = {p.name: p for p in registry.processes(run.run_id)}
    message = _base_message(run)
    if metrics is not None and metrics.step is not None:
        message += f" Step {metrics.step}" + (f" of {metrics.num_steps}" if metrics.num_steps else "")
        if metrics.reward_mean is not None:
            message += f", reward mean {metrics.reward_mean:.4g}"
        message += "."
    held_out = held_out_summary(run_dir)
    if held_out is not None:
        message += f" {held_out.sentence}."
    metrics_file = run_dir / METRICS_FILE
    # The head too: the warning compares the latest steps with the first (a step 0 evaluation
    # row may come first, hence the spare rows).
    signal = with_held_out(
        learning_signal(
            read_jsonl_tail(metrics_file, SIGNAL_WINDOW_STEPS), read_jsonl_head(metrics_file, 2 * SIGNAL_WINDOW_STEPS)
        ),
        held_out,
    )
    if signal is not None and signal.warning:
        message += f" {signal.warning}"
    if signal is not None and signal.held_out_flat:
        message += f" {signal.held_out_flat}"
    for fired in signal.monitors if signal is not None else []:
        message += f" {fired.warning}"
    env_errors = _environment_errors(run_dir)
    if env_errors is not None and run.state != RunState.FAILED:
        message += f" {env_errors[1]}."
    notes = registry.notes + store.damage_report(run_dir)
    if notes:
        message += " Problems: " + " ".join(notes)
    scheduler = job_of(run) if run.on_cluster else None
    if scheduler is not None and (run.state not in TERMINAL_STATES or scheduler.state != JobState.COMPLETED):
        message += f" The {scheduler.sentence()}."
    if run.state in TERMINAL_STATES and not run.on_cluster:
        message += _ending_note(registry, run)
    return RunStatus(
        **_identity(run, now),
        processes={name: _process_status(procs.get(name)) for name in PROCESS_NAMES},
        environment_errors=env_errors[0] if env_errors else None,
        learning_signal=signal,
        trainer_phase=status.get("phase"),
        metrics=metrics,
        held_out=held_out,
        held_out_note=held_out_note(run_dir, run.state in TERMINAL_STATES) if held_out is None else None,
        wandb_project=run.wandb_project,
        wandb_run_name=run.wandb_run_name,
        wandb_url=status.get("wandb_url") or run.wandb_url,
        ports={"api": run.api_port, "inference": run.inference_port},
        logs={name: log_uri(run.run_id, name) for name in LOG_NAMES},
        config_path=run.config_path,
        launcher=run.launcher or "local",
        scheduler=scheduler,
        created_at=run.created_at,
        ended_at=run.ended_at,
        message=message,
        notes=notes,
    )


def _environment_errors(run_dir: Path) -> tuple[EnvironmentErrors, str] | None:
    """What the environment raised on (None: nothing), and one sentence about it."""
    health = read_env_health(run_dir / ENV_HEALTH_FILE)
    summary = health.summary() if health else None
    if health is None or health.last_error is None or summary is None:
        return None
    errors = EnvironmentErrors(
        groups_scored=health.groups_scored,
        groups_failed=health.groups_failed,
        last_exception=health.last_error.sentence(),
        traceback=health.last_error.traceback,
    )
    return errors, summary


def _ending_note(registry: Registry, run: RunRecord) -> str:
    """For an ended run: which of its processes are still being ended, and what was left alone."""
    note = ""
    left = _live_pids(registry, run)
    if left:
        note += (
            f" Its processes (pids {left}) are still being ended in the background (gently first); check again shortly."
        )
    for text in _left_alone_notes(registry, run.run_id):
        note += f" {text}."
    return note


def _process_status(proc: ProcessRecord | None) -> ProcessStatus:
    if proc is None:
        return ProcessStatus(status="pending")
    text = str(proc.state)
    if proc.state in (ProcState.EXITED, ProcState.STOPPED):
        text = f"{proc.state} ({proc.exit_code})" if proc.exit_code is not None else str(proc.state)
    alive = proc.state in (ProcState.STARTING, ProcState.RUNNING) and processes.is_alive(proc.pid, proc.create_time)
    return ProcessStatus(
        state=proc.state, status=text, pid=proc.pid, port=proc.port, exit_code=proc.exit_code, alive=alive
    )


def _float(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _metrics(path: Path, trainer_status: dict[str, Any]) -> RunMetrics | None:
    latest = last_json_line(path)
    if latest is None and not trainer_status:
        return None
    latest = latest or {}
    step = latest.get(STEP_KEY)
    # Accuracy is the environment's to report: it logs it to env_metrics.jsonl (see
    # mcp_rl.metrics.env_metrics); the trainer's own line wins where both have a key.
    env_latest = last_json_line(path.with_name(ENV_METRICS_FILE)) or {}
    latest = {**env_latest, **latest}
    return RunMetrics(
        step=int(step) if isinstance(step, int) else trainer_status.get(STEP_KEY),
        num_steps=trainer_status.get("num_steps"),
        reward_mean=_float(latest.get(REWARD_KEY)),
        loss=_float(latest.get(LOSS_KEY)),
        percent_correct=_float(latest.get(PERCENT_CORRECT_KEY)),
        eval_percent_correct=_float(latest.get(EVAL_PERCENT_CORRECT_KEY)),
        time=_float(latest.get(TIME_KEY)),
        cost_usd_estimated=_float(latest.get(COST_TOTAL_USD_KEY)),
        step_cost_usd_estimated=_float(latest.get(COST_STEP_USD_KEY)),
        latest=latest,
    )


# --- list ----------------------------------------------------------------------------------
def list_runs(settings: Settings, repair: bool = True) -> RunList:
    """Every run, newest first; `repair` as in `run_status`."""
    registry = registry_for(settings)
    now = time.time()
    summaries = []
    notes = []
    for run in registry.list_runs():
        run = refresh(registry, run, settings) if repair else observe(run, registry)
        latest = last_json_line(Path(run.run_dir) / METRICS_FILE) or {}
        step = latest.get(STEP_KEY)
        summaries.append(
            RunSummary(
                run_id=run.run_id,
                environment=run.environment,
                status=run.state,
                backend=run.backend,
                created_at=run.created_at,
                running_time_minutes=_running_minutes(run, now),
                step=step if isinstance(step, int) else None,
                latest_reward=_float(latest.get(REWARD_KEY)),
                wandb_run_name=run.wandb_run_name,
                cause=run.cause.splitlines()[0] if run.cause and run.state == RunState.FAILED else None,
            )
        )
    # Ended runs whose processes are still being ended (or were left alone): said, not hidden.
    for run_id in registry.ended_runs_with_live_processes():
        ended = registry.get_run(run_id)
        if ended is not None and (note := _ending_note(registry, ended).strip()):
            notes.append(f"Run {run_id} ({ended.state}): {note}")
    return RunList(runs=summaries, count=len(summaries), notes=registry.notes + notes)


# --- stop ----------------------------------------------------------------------------------
def _already_ended(settings: Settings, registry: Registry, run: RunRecord, deadline: float) -> StopResult:
    """Nothing to stop, unless processes of the ended run are still alive (a clean-up that was
    itself killed): those are ended now, by the detached stopper."""
    left = _live_pids(registry, run)
    if not left:
        return StopResult(
            run_id=run.run_id,
            status=run.state,
            was_running=False,
            message=f"Run {run.run_id} had already ended ({run.state}); nothing to stop.",
            left_alone=_left_alone_notes(registry, run.run_id),
        )
    launch_stopper(settings, run, f"left alive after the run {run.state}")
    processes.wait_until(lambda: not _live_pids(registry, run), deadline)
    still = _live_pids(registry, run)
    message = f"Run {run.run_id} had already ended ({run.state}), but its processes {left} were still alive: "
    message += (
        f"{still} are still being ended in the background; check with rl_check_status('{run.run_id}')."
        if still
        else "they have been ended."
    )
    return StopResult(
        run_id=run.run_id,
        status=run.state,
        was_running=False,
        in_progress=bool(still),
        message=message,
        processes_left=still,
        left_alone=_left_alone_notes(registry, run.run_id),
    )


def stop_run(
    settings: Settings, run_id: str, policy: Policy | None = None, budget_s: float | None = None
) -> StopResult:
    """End a run: its supervisor stops env -> trainer -> API. Answers within `budget_s` (the tool
    time budget): what does not fit (a slow graceful stop, a supervisor that is gone or wedged)
    is finished by a detached stopper, and the answer says so."""
    policy = policy or Policy.from_settings(settings)
    budget = settings.tool_time_budget_s if budget_s is None else budget_s
    deadline = time.monotonic() + max(budget - STOP_ANSWER_MARGIN_S, budget / 2)
    registry = registry_for(settings)
    run = _get_run(registry, run_id)
    if run.state in TERMINAL_STATES:
        return _already_ended(settings, registry, run, deadline)
    if not registry.transition(run.run_id, RunState.STOPPING, STOP_REQUESTED_CAUSE):
        run = _get_run(registry, run_id)
        if run.state in TERMINAL_STATES:
            return _already_ended(settings, registry, run, deadline)

    def ended() -> bool:
        current = registry.get_run(run.run_id)
        return current is not None and current.state in TERMINAL_STATES

    if run.launcher not in (None, "local"):
        return _stop_job(settings, registry, run_id, deadline, budget)
    supervisor = processes.prove(run.supervisor_pid, run.supervisor_create_time, run_marker(run.run_dir))
    if supervisor.alive and supervisor.process is not None:
        # A frozen supervisor cannot act on SIGTERM until continued.
        processes.continue_if_frozen(supervisor)
        try:
            supervisor.process.send_signal(signal.SIGTERM)
        except psutil.NoSuchProcess:
            pass

        def supervisor_done() -> bool:
            # Frozen again (SIGSTOP) while stopping: continued again, so it can finish.
            proof = processes.prove(run.supervisor_pid, run.supervisor_create_time, run_marker(run.run_dir))
            processes.continue_if_frozen(proof)
            return ended() or not proof.alive

        processes.wait_until(supervisor_done, deadline)
    stopper = None
    if not ended():
        # The supervisor is gone, unproven or slower than this call may wait: a detached stopper
        # gives a live one its full stop time, then ends what is left (proven processes only).
        stopper = launch_stopper(settings, run, "stopped on request")
        if stopper is None:
            end_leftovers(registry, run, policy, "stopped on request (supervisor gone)")
            registry.transition(run.run_id, RunState.STOPPED, "stopped on request; no process left")
        processes.wait_until(ended, deadline)
    if not ended():
        return _still_stopping(registry, run.run_id, budget, stopper)
    return _stop_result(registry, run.run_id, _left_alone_notes(registry, run.run_id))


def _stop_job(settings: Settings, registry: Registry, run_id: str, deadline: float, budget: float) -> StopResult:
    """A cluster run: the registry already says stopping (its supervisor, on its node, sees that and
    stops gently); the job is also sent a TERM with no kill (a pending job is cancelled outright).
    What does not end within this call is ended by a detached stopper: after the run's full stop
    time it ends the job through the scheduler."""
    run = _get_run(registry, run_id)
    if run.job_id is None or run.launcher is None:  # submitted by a server that stopped first
        registry.transition(run_id, RunState.STOPPED, "stopped on request; no job was submitted")
        return _stop_result(registry, run_id, [])
    launcher = launcher_for(run.launcher, run.job_address)
    notes: list[str] = []
    try:
        if job_of(run, fresh=True).state == JobState.PENDING:
            launcher.kill(run.job_id)
        else:
            launcher.request_stop(run.job_id)
    except LaunchError as exc:
        notes.append(f"the scheduler was not reached ({exc}); the supervisor stops on the registry's word")

    def ended() -> bool:
        current = registry.get_run(run_id)
        return current is not None and current.state in TERMINAL_STATES and job_of(current, fresh=True).ended

    processes.wait_until(ended, deadline)
    current = _get_run(registry, run_id)
    if current.state not in TERMINAL_STATES and job_of(current, fresh=True).ended:
        registry.transition(run_id, RunState.STOPPED, f"stopped on request; {job_of(current).sentence()}")
    if not ended():
        stopper = launch_stopper(settings, current, "stopped on request")
        result = _still_stopping(registry, run_id, budget, stopper)
        return result.model_copy(update={"left_alone": result.left_alone + notes})
    return _stop_result(registry, run_id, notes)


def _left_alone_notes(registry: Registry, run_id: str) -> list[str]:
    """What this run's stops and clean-ups left alone (recorded as events by end_leftovers)."""
    return list(dict.fromkeys(e.cause for e in registry.events(run_id) if e.state == "left alone" and e.cause))


def _still_stopping(registry: Registry, run_id: str, budget: float, stopper: int | None) -> StopResult:
    run = _get_run(registry, run_id)
    who = f"a detached stopper (pid {stopper})" if stopper else f"its supervisor (pid {run.supervisor_pid})"
    return StopResult(
        run_id=run_id,
        status=run.state,
        was_running=True,
        in_progress=True,
        message=(
            f"Run {run_id} is still stopping: {who} is ending its processes gently (the trainer "
            f"finishes its step and saves a checkpoint first), which takes longer than this call may "
            f"wait ({budget:g} s). It continues in the background; call rl_check_status('{run_id}') "
            "until it says 'stopped'."
        ),
        processes_left=_live_pids(registry, run),
        left_alone=_left_alone_notes(registry, run_id),
    )


def _live_pids(registry: Registry, run: RunRecord) -> list[int]:
    marker = run_marker(run.run_dir)
    return [
        p.pid for p in registry.processes(run.run_id) if p.pid and processes.prove(p.pid, p.create_time, marker).alive
    ]


def _stop_result(registry: Registry, run_id: str, left_alone: list[str]) -> StopResult:
    final = _get_run(registry, run_id)
    left = _live_pids(registry, final)
    ports = [p for p in (final.api_port, final.inference_port) if p and not port_is_free(p)]
    message = f"Run {run_id} {final.state}."
    if left or ports:
        message += f" Still alive: pids {left}; ports in use: {ports}."
    elif not left_alone:
        message += " No process of the run is left and its ports are released."
    else:
        message += " No process proven to be the run's is left."
    if left_alone:
        message += " " + " ".join(f"{note}." for note in left_alone)
    return StopResult(
        run_id=run_id,
        status=final.state,
        was_running=True,
        message=message,
        processes_left=left,
        ports_in_use=ports,
        left_alone=left_alone,
    )


# --- resources -----------------------------------------------------------------------------
def read_log(settings: Settings, run_id: str, process: str, tail: int = DEFAULT_LOG_TAIL) -> str:
    """The last `tail` lines of one of the run's logs (api, trainer, env, supervisor)."""
    run = _get_run(registry_for(settings), run_id)
    if process not in LOG_NAMES:
        raise NotFound(f"Unknown process {process!r}; logs exist for {', '.join(LOG_NAMES)}.")
    tail = max(1, min(int(tail), MAX_LOG_TAIL))
    path = Path(run.run_dir) / LOGS_DIR / f"{process}.log"
    lines = tail_lines(path, tail + 1)
    if not path.exists():
        return f"[{process}.log of run {run.run_id} does not exist yet: the process has not started]\n"
    header = ""
    if len(lines) > tail:
        lines = lines[-tail:]
        header = f"[last {tail} lines of {process}.log; read with ?tail=N (up to {MAX_LOG_TAIL}) for more]\n"
    return header + "\n".join(lines) + ("\n" if lines else "")


def read_config(settings: Settings, run_id: str) -> str:
    run = _get_run(registry_for(settings), run_id)
    try:
        text = Path(run.config_path).read_text(encoding="utf-8")
        if not text.strip():
            raise DamagedState(
                f"The run.yaml of run {run.run_id} is empty ({run.config_path}). "
                "The run's metrics and results are still readable (rl_get_results)."
            )
        return text
    except FileNotFoundError as exc:
        raise NotFound(f"Run {run.run_id} has no run.yaml any more ({run.config_path}).") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise DamagedState(
            f"The run.yaml of run {run.run_id} cannot be read ({exc}); it is at {run.config_path}. "
            "The run's metrics and results are still readable (rl_get_results)."
        ) from exc


def read_metrics(settings: Settings, run_id: str, tail: int = DEFAULT_METRICS_TAIL) -> dict[str, Any]:
    """The last `tail` metrics lines of a run, oldest first."""
    run = _get_run(registry_for(settings), run_id)
    rows = []
    for line in tail_lines(Path(run.run_dir) / METRICS_FILE, tail):
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return {"run_id": run.run_id, "status": str(run.state), "count": len(rows), "rows": rows}
