"""A run's status and the list of runs, answered from local state (state.db and the run directory)
so status calls stay fast; also what is left of a run (its live processes, what its stops left
alone), which the stop's answers read too.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from mcp_rl import processes
from mcp_rl.errors import UnknownId, clip
from mcp_rl.metrics import store
from mcp_rl.metrics.signal import WINDOW_STEPS as SIGNAL_WINDOW_STEPS
from mcp_rl.metrics.signal import learning_signal, with_held_out
from mcp_rl.proof.held_out_note import held_out_note
from mcp_rl.proof.summary import held_out_summary
from mcp_rl.rundir import (
    COST_STEP_USD_KEY,
    COST_TOTAL_USD_KEY,
    ENV_HEALTH_FILE,
    ENV_METRICS_FILE,
    EVAL_PERCENT_CORRECT_KEY,
    LOSS_KEY,
    METRICS_FILE,
    PERCENT_CORRECT_KEY,
    REWARD_KEY,
    STEP_KEY,
    TIME_KEY,
    is_run_id,
    read_env_health,
    read_jsonl_head,
    read_jsonl_tail,
)
from mcp_rl.settings import Settings
from mcp_rl.supervisor.launchers import JobState
from mcp_rl.supervisor.models import (
    EnvironmentErrors,
    ProcessStatus,
    RunList,
    RunMetrics,
    RunStatus,
    RunSummary,
    log_uri,
)
from mcp_rl.supervisor.reconcile import job_of, observe, refresh
from mcp_rl.supervisor.registry import ProcessRecord, Registry, RunRecord, registry_for
from mcp_rl.supervisor.states import LOG_NAMES, PROCESS_NAMES, TERMINAL_STATES, ProcState, RunState, run_marker
from mcp_rl.supervisor.tail import last_json_line


def get_run(registry: Registry, run_id: str) -> RunRecord:
    run = registry.get_run(run_id) if is_run_id(run_id) else None
    if run is None:
        raise UnknownId(
            f"Unknown run_id {clip(run_id)}. Call rl_list_runs to see the runs that exist.", "run_id", run_id
        )
    return run


def run_status(settings: Settings, run_id: str, repair: bool = True) -> RunStatus:
    """The state of one run from local state. A run whose supervisor died reads as failed either
    way; with `repair` the end is also recorded (and its leftovers ended by a detached stopper),
    without it nothing is written (the MCP server's status tools: its watcher repairs)."""
    registry = registry_for(settings)
    run = get_run(registry, run_id)
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
    left = live_pids(registry, run)
    if left:
        note += (
            f" Its processes (pids {left}) are still being ended in the background (gently first); check again shortly."
        )
    for text in left_alone_notes(registry, run.run_id):
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
        state=proc.state,
        status=text,
        pid=proc.pid,
        port=proc.port,
        exit_code=proc.exit_code,
        alive=alive,
        descendants=processes.count_descendants(proc.pid) if alive else None,
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
    # mcp_rl.environments.env_metrics); the trainer's own line wins where both have a key.
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


def left_alone_notes(registry: Registry, run_id: str) -> list[str]:
    """What this run's stops and clean-ups left alone (recorded as events by end_leftovers)."""
    return list(dict.fromkeys(e.cause for e in registry.events(run_id) if e.state == "left alone" and e.cause))


def live_pids(registry: Registry, run: RunRecord) -> list[int]:
    marker = run_marker(run.run_dir)
    return [
        p.pid for p in registry.processes(run.run_id) if p.pid and processes.prove(p.pid, p.create_time, marker).alive
    ]
