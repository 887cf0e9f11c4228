"""Stopping a run (rl_stop_training): its supervisor stops env -> trainer -> API, and a detached
stopper finishes what does not fit in the tool's time budget; the answer says which.
"""

from __future__ import annotations

import signal
import time

import psutil

from mcp_rl import processes
from mcp_rl.errors import LaunchError
from mcp_rl.ports import port_is_free
from mcp_rl.settings import Settings
from mcp_rl.supervisor.launchers import JobState, launcher_for
from mcp_rl.supervisor.models import StopResult
from mcp_rl.supervisor.reconcile import end_leftovers, job_of, launch_stopper
from mcp_rl.supervisor.registry import Registry, RunRecord, registry_for
from mcp_rl.supervisor.states import STOP_REQUESTED_CAUSE, TERMINAL_STATES, RunState, run_marker
from mcp_rl.supervisor.status import get_run, left_alone_notes, live_pids
from mcp_rl.supervisor.supervisor import Policy

# Kept back from the tool time budget to build and send the stop answer.
STOP_ANSWER_MARGIN_S = 3.0


def _already_ended(settings: Settings, registry: Registry, run: RunRecord, deadline: float) -> StopResult:
    """Nothing to stop, unless processes of the ended run are still alive (a clean-up that was
    itself killed): those are ended now, by the detached stopper."""
    left = live_pids(registry, run)
    if not left:
        return StopResult(
            run_id=run.run_id,
            status=run.state,
            was_running=False,
            message=f"Run {run.run_id} had already ended ({run.state}); nothing to stop.",
            left_alone=left_alone_notes(registry, run.run_id),
        )
    launch_stopper(settings, run, f"left alive after the run {run.state}")
    processes.wait_until(lambda: not live_pids(registry, run), deadline)
    still = live_pids(registry, run)
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
        left_alone=left_alone_notes(registry, run.run_id),
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
    run = get_run(registry, run_id)
    if run.state in TERMINAL_STATES:
        return _already_ended(settings, registry, run, deadline)
    if not registry.transition(run.run_id, RunState.STOPPING, STOP_REQUESTED_CAUSE):
        run = get_run(registry, run_id)
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
    return _stop_result(registry, run.run_id, left_alone_notes(registry, run.run_id))


def _stop_job(settings: Settings, registry: Registry, run_id: str, deadline: float, budget: float) -> StopResult:
    """A cluster run: the registry already says stopping (its supervisor, on its node, sees that and
    stops gently); the job is also sent a TERM with no kill (a pending job is cancelled outright).
    What does not end within this call is ended by a detached stopper: after the run's full stop
    time it ends the job through the scheduler."""
    run = get_run(registry, run_id)
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
    current = get_run(registry, run_id)
    if current.state not in TERMINAL_STATES and job_of(current, fresh=True).ended:
        registry.transition(run_id, RunState.STOPPED, f"stopped on request; {job_of(current).sentence()}")
    if not ended():
        stopper = launch_stopper(settings, current, "stopped on request")
        result = _still_stopping(registry, run_id, budget, stopper)
        return result.model_copy(update={"left_alone": result.left_alone + notes})
    return _stop_result(registry, run_id, notes)


def _still_stopping(registry: Registry, run_id: str, budget: float, stopper: int | None) -> StopResult:
    run = get_run(registry, run_id)
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
        processes_left=live_pids(registry, run),
        left_alone=left_alone_notes(registry, run_id),
    )


def _stop_result(registry: Registry, run_id: str, left_alone: list[str]) -> StopResult:
    final = get_run(registry, run_id)
    left = live_pids(registry, final)
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
