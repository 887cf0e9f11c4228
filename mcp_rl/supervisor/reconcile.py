"""Reconciliation: runs whose supervisor is gone are ended honestly, and nothing of them is left.

A supervisor can die (SIGKILL, OOM, a reboot) while its processes live on in their own
sessions. Any server (at start-up, in the background) or status call notices from the
supervisor's recorded pid and start time, records the end with its cause, and ends the
leftover process groups: env, trainer, API, in that order; only processes proven to be the
run's (pid, start time and the run's marker, see mcp_rl.processes) are ever signalled.
"""

from __future__ import annotations

import logging
import sys
import time
from pathlib import Path

from mcp_rl import processes
from mcp_rl.locking import is_held
from mcp_rl.settings import Settings
from mcp_rl.supervisor.launchers import JobInfo, JobState, job_info
from mcp_rl.supervisor.models import Cleanup, ReconcileReport
from mcp_rl.supervisor.registry import Registry, RunRecord, registry_for
from mcp_rl.supervisor.states import (
    ACTIVE_STATES,
    PROCESS_NAMES,
    STOP_REQUESTED_CAUSE,
    TERMINAL_STATES,
    ProcState,
    RunState,
    run_marker,
)
from mcp_rl.supervisor.supervisor import Policy

log = logging.getLogger(__name__)

# A run row may exist a moment before its supervisor's pid is recorded.
LAUNCH_WINDOW_S = 60.0


def end_leftovers(registry: Registry, run: RunRecord, policy: Policy, cause: str) -> Cleanup:
    """End the process groups of a run whose supervisor is gone: env, trainer, API, then the
    supervisor's own group in case it is wedged. Only processes proven to be the run's (pid,
    start time and the run's marker) are signalled; the others are left alone and named."""
    marker = run_marker(run.run_dir)
    cleanup = Cleanup()
    by_name = {p.name: p for p in registry.processes(run.run_id)}
    targets = [(name, by_name[name]) for name in reversed(PROCESS_NAMES) if name in by_name and by_name[name].pid]
    for name, proc in targets:
        if proc.state not in (ProcState.STARTING, ProcState.RUNNING) and not processes.is_alive(
            proc.pid, proc.create_time
        ):
            continue
        ended = processes.stop(proc.pid, proc.pgid, proc.create_time, marker, policy.grace_for(name))
        if not ended.proven:
            _left_alone(registry, run, cleanup, name, proc.pid, ended.note)
            continue
        cleanup.ended.extend(ended.signalled)
        cleanup.still_alive.extend(ended.left)
        if not ended.left:
            registry.set_process(
                run.run_id, name, cause=cause, state=ProcState.STOPPED, exit_code=ended.exit_code, ended_at=time.time()
            )
    if run.supervisor_pid:
        ended = processes.stop(
            run.supervisor_pid, run.supervisor_pid, run.supervisor_create_time, marker, policy.stop_grace_s
        )
        if not ended.proven:
            _left_alone(registry, run, cleanup, "supervisor", run.supervisor_pid, ended.note)
        cleanup.ended.extend(ended.signalled)
        cleanup.still_alive.extend(ended.left)
    return cleanup


def _left_alone(registry: Registry, run: RunRecord, cleanup: Cleanup, name: str, pid: int | None, why: str) -> None:
    note = f"{name} pid {pid} could not be proven to be this run's ({why}); left alone"
    cleanup.left_alone.append(note)
    # Its row stays as recorded (nothing proves it ended), so every reconciliation meets it again.
    if not any(e.state == "left alone" and e.cause == note for e in registry.events(run.run_id)):
        registry.record_event(run.run_id, name, "left alone", note)


def supervisor_gone(run: RunRecord, now: float) -> bool:
    if run.launcher not in (None, "local"):
        # A cluster job's supervisor runs on another node: the scheduler says whether it ended.
        if run.job_id is None:
            return now - run.created_at > LAUNCH_WINDOW_S
        return job_of(run).ended
    if run.supervisor_pid is None:
        return now - run.created_at > LAUNCH_WINDOW_S
    return not processes.is_alive(run.supervisor_pid, run.supervisor_create_time)


def job_of(run: RunRecord, fresh: bool = False) -> JobInfo:
    assert run.launcher is not None and run.job_id is not None
    return job_info(run.launcher, run.job_id, run.job_address, fresh=fresh)


def _gone_cause(run: RunRecord) -> str:
    """Why an active run ended without its supervisor recording it."""
    if run.on_cluster:
        return (
            f"the {run.launcher} job ended while the run was {run.state}: {job_of(run).sentence()}. "
            f"Check rl://runs/{run.run_id}/logs/supervisor."
        )
    if run.launcher not in (None, "local"):
        return f"the {run.launcher} job was never submitted (the server that submitted it stopped first)"
    pid = run.supervisor_pid
    if pid:
        return (
            f"the run supervisor (pid {pid}) died while the run was {run.state}; its remaining processes are being "
            f"ended (only those proven to be the run's). Check rl://runs/{run.run_id}/logs/supervisor."
        )
    return "the run supervisor never started (the server that launched it stopped first)"


def with_scheduler_cause(registry: Registry | None, run: RunRecord, write: bool = True) -> RunRecord:
    """An ended cluster run whose job was ended from outside mcp-rl (scancel, ray job stop, a time
    limit, a node failure): its cause says so in the scheduler's words. Written once with `write`;
    without it only the returned copy has it."""
    if not run.on_cluster or run.state not in TERMINAL_STATES or (run.cause and f"job {run.job_id}" in run.cause):
        return run
    if registry is None:
        return run  # who asked for the end is in the registry's events
    info = job_of(run)
    if not info.ended or info.state == JobState.COMPLETED:
        return run
    asked = any(e.state == RunState.STOPPING and e.cause == STOP_REQUESTED_CAUSE for e in registry.events(run.run_id))
    if asked:
        return run  # rl_stop_training ended it: the scheduler's "cancelled" is ours
    cause = f"ended from outside mcp-rl: {info.sentence()}; the supervisor recorded: {run.cause}"
    if registry is not None and write:
        registry.update_run(run.run_id, cause=cause)
    return run.model_copy(update={"cause": cause})


def refresh(registry: Registry, run: RunRecord, settings: Settings) -> RunRecord:
    """An active run whose supervisor is gone is ended now, never reported as running.

    Only the state change happens here (status calls must stay fast, and the CLI calling this
    exits at once): its leftover processes are ended by a detached stopper that outlives the
    caller (and by the next reconciliation if that one dies too).
    """
    if run.state not in ACTIVE_STATES:
        return with_scheduler_cause(registry, run)
    if not supervisor_gone(run, time.time()):
        return run
    _reconcile_run(registry, run, Policy.from_settings(settings), background=settings)
    latest = registry.get_run(run.run_id) or run
    return with_scheduler_cause(registry, latest)


def observe(run: RunRecord, registry: Registry | None = None) -> RunRecord:
    """What `refresh` would record, without writing: an active run whose supervisor is gone reads
    as failed (or stopped, if a stop was asked for). Status reads use this, so polling writes
    nothing; the server's own watcher (`repair_dead_runs`) and the next start record the end."""
    if run.state not in ACTIVE_STATES:
        return with_scheduler_cause(registry, run, write=False)
    if not supervisor_gone(run, time.time()):
        return run
    if run.state == RunState.STOPPING:
        if stopper_at_work(run.run_dir):
            return run  # still stopping: a stopper is ending its processes
        return run.model_copy(
            update={"state": RunState.STOPPED, "cause": "stopped on request; the supervisor was gone"}
        )
    return run.model_copy(update={"state": RunState.FAILED, "cause": _gone_cause(run)})


def repair_dead_runs(settings: Settings) -> list[str]:
    """Record the end of every active run whose supervisor is gone (its leftovers are ended by a
    detached stopper); the ids repaired. For a server's watcher: one query when nothing is wrong."""
    registry = registry_for(settings)
    repaired = []
    for run in registry.list_runs(ACTIVE_STATES):
        if refresh(registry, run, settings).state != run.state:
            repaired.append(run.run_id)
    return repaired


# In the run folder; held (flock) while a stopper works, released by the kernel if it dies.
STOPPER_LOCK = ".stopper.lock"


def stopper_at_work(run_dir: str | Path) -> bool:
    """True while a stopper holds this run's lock (so a watcher does not start another each poll)."""
    return is_held(Path(run_dir) / STOPPER_LOCK)  # no lock file: no stopper ever worked on it


def launch_stopper(settings: Settings, run: RunRecord, cause: str) -> int | None:
    """Start a detached `mcp_rl.supervisor.stopper` for `run`; returns its pid (None on failure)."""
    run_dir = Path(run.run_dir)
    argv = [sys.executable, "-m", "mcp_rl.supervisor.stopper", "--run-id", run.run_id, "--cause", cause]
    try:
        popen = processes.spawn(
            argv, run_dir / "logs" / "supervisor.log", settings.child_env(), cwd=run_dir, marker=run_marker(run.run_dir)
        )
    except OSError as exc:
        log.error("could not start a stopper for run %s: %s", run.run_id, exc)
        return None
    processes.reap_in_background(popen)
    registry_for(settings).record_event(run.run_id, "stopper", "started", f"pid {popen.pid}: {cause}")
    return popen.pid


def _reconcile_run(registry: Registry, run: RunRecord, policy: Policy, background: Settings | None = None) -> RunState:
    """Record the end of a run whose supervisor is gone, then end its leftovers: here, or with
    `background` (the settings to launch it with) in a detached stopper."""
    # The supervisor may have recorded the end just before exiting.
    current = registry.get_run(run.run_id)
    if current is None or current.state not in ACTIVE_STATES:
        return current.state if current else run.state
    if current.on_cluster or current.launcher not in (None, "local"):
        # The scheduler has ended the job's processes: only the end is recorded here.
        if current.state == RunState.STOPPING:
            ended = job_of(current).sentence() if current.on_cluster else "no job was submitted"
            registry.transition(run.run_id, RunState.STOPPED, f"stopped on request; {ended}")
        else:
            registry.transition(run.run_id, RunState.FAILED, _gone_cause(current))
        latest = registry.get_run(run.run_id)
        return latest.state if latest else RunState.FAILED
    if current.state == RunState.STOPPING:
        final, why = RunState.STOPPED, "stopped on request (supervisor gone)"
        # A run still stopping is not recorded as stopped while its processes live: a detached
        # stopper ends them (a stubborn trainer gets its grace) and records STOPPED after, so
        # rl_stop_training and status reads never say "stopped" beside live processes.
        if background is not None and (stopper_at_work(run.run_dir) or launch_stopper(background, current, why)):
            return RunState.STOPPING
        won = registry.transition(run.run_id, RunState.STOPPED, "stopped on request; the supervisor was gone")
    else:
        final, why = RunState.FAILED, "stopped because the supervisor died"
        won = registry.transition(run.run_id, RunState.FAILED, _gone_cause(current))
    if not won:  # another server or the supervisor itself recorded the end first and cleans up
        latest = registry.get_run(run.run_id)
        return latest.state if latest else final
    if background is not None:
        launch_stopper(background, current, why)
    else:
        end_leftovers(registry, current, policy, why)
    return final


def reconcile(settings: Settings, policy: Policy | None = None) -> ReconcileReport:
    """Find active runs whose supervisor died: mark them failed (or stopped, if a stop was
    requested) and end their leftover process groups; also end processes still alive of runs
    that ended without their supervisor cleaning up. Cheap when nothing is wrong."""
    policy = policy or Policy.from_settings(settings)
    registry = registry_for(settings)
    active = registry.list_runs(ACTIVE_STATES)
    report = ReconcileReport(checked=len(active))
    now = time.time()
    for run in active:
        if not supervisor_gone(run, now):
            continue
        final = _reconcile_run(registry, run, policy)
        if final == RunState.FAILED:
            report.failed.append(run.run_id)
        elif final == RunState.STOPPED:
            report.stopped.append(run.run_id)
    for run_id in registry.ended_runs_with_live_processes():
        ended = registry.get_run(run_id)
        if ended is not None and not ended.on_cluster and supervisor_gone(ended, now):
            end_leftovers(registry, ended, policy, f"left alive after the run {ended.state}")
            report.cleaned.append(run_id)
    if report.failed or report.stopped or report.cleaned:
        log.warning(
            "reconciled runs whose supervisor was gone: failed %s, stopped %s, leftovers ended %s",
            report.failed,
            report.stopped,
            report.cleaned,
        )
    return report
