"""Waiting for a run's stop within a deadline, and the stop's answer: what is left of the run and
which checkpoint survived. The caller (rl_stop_training) owns the time budget and the progress
notifications; here they are a number of seconds and a callback."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

import anyio

from mcp_rl import background
from mcp_rl.metrics.store import read_checkpoints, survivor_note
from mcp_rl.settings import Settings
from mcp_rl.supervisor import service
from mcp_rl.supervisor.models import RunStatus, StopAnswer, StopResult
from mcp_rl.supervisor.states import TERMINAL_STATES, RunState

POLL_S = 0.5

STOP_AGAIN = (
    " The stop goes on in the background: call rl_stop_training(run_id) again (or rl_wait_for_run(run_id)) "
    "to wait for its end."
)


def _alive(status: RunStatus) -> list[int]:
    return [p.pid for p in status.processes.values() if p.alive and p.pid]


def _ended(status: RunStatus) -> bool:
    return status.status in TERMINAL_STATES and not _alive(status)


def stop_underway(status: RunStatus) -> bool:
    """A stop is under way (an earlier call's, another server's, or a detached stopper ending
    what is left): wait for its end instead of starting another."""
    return status.status == RunState.STOPPING or (status.status in TERMINAL_STATES and bool(_alive(status)))


def survivor(settings: Settings, run_id: str) -> str:
    """Which checkpoint survived the stop and until when (from the run's checkpoint index)."""
    note = survivor_note(read_checkpoints(settings.runs_dir / run_id))
    return f" Checkpoint: {note}" if note else ""


def stop_answer(settings: Settings, result: StopResult, seconds: float) -> StopAnswer:
    """The answer to a stop that returned within the budget (`seconds`: how long it took)."""
    in_progress = result.status == RunState.STOPPING
    message = result.message + (STOP_AGAIN if in_progress else "") + survivor(settings, result.run_id)
    return StopAnswer(
        **{**result.model_dump(), "message": message, "in_progress": in_progress}, stopping_for_s=round(seconds, 1)
    )


def stop_progress(settings: Settings, run_id: str, seconds: float) -> str:
    """Which processes of a stopping run are still up, from the registry."""
    registry = service.registry_for(settings)
    states = ", ".join(f"{p.name} {p.state}" for p in registry.processes(run_id))
    return f"stopping run {run_id} for {seconds:.0f} s: {states or 'no process recorded'}"


async def wait_for_stop(
    settings: Settings, run_id: str, timeout_s: float, on_progress: Callable[[str], Awaitable[None]]
) -> StopAnswer:
    """Wait up to `timeout_s` for a stopping run to end and its processes to be gone, telling
    `on_progress` which are still up; answer with what is left of it."""
    started = time.monotonic()
    deadline = started + max(0.0, timeout_s)

    async def report(status: RunStatus) -> None:
        if not _ended(status) and time.monotonic() < deadline:
            seconds = time.monotonic() - started
            await on_progress(await anyio.to_thread.run_sync(lambda: stop_progress(settings, run_id, seconds)))

    status = await background.wait_for_job(
        lambda: service.run_status(settings, run_id), lambda s: not _ended(s), timeout_s, report, POLL_S
    )
    left = _alive(status)
    finished = _ended(status)
    if not finished:
        message = f"Run {run_id} is {status.status}; its processes are still being ended (pids {left})." + STOP_AGAIN
    else:
        message = f"Run {run_id} {status.status}" + (f": {status.cause}." if status.cause else ".")
        message += " No process of the run is left." + survivor(settings, run_id)
    return StopAnswer(
        run_id=run_id,
        status=status.status,
        was_running=True,
        message=message,
        processes_left=left,
        in_progress=not finished,
        stopping_for_s=round(time.monotonic() - started, 1),
    )
