"""`python -m mcp_rl.supervisor.stopper --run-id ID`: finishes ending a run in the background.

A tool call (and the short-lived `mcp-rl runs` command) must answer within its time budget, but a
graceful stop can take longer (the trainer finishes its step and saves a checkpoint first). So the
work that does not fit is handed to this detached process, in its own session, that outlives the
caller: it gives a live supervisor its full stop time, then ends whatever of the run is left
(proven processes only) and records the end. One stopper per run at a time (a lock in the run
folder); a second one exits at once.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

from mcp_rl import processes, redact
from mcp_rl.errors import LaunchError
from mcp_rl.locking import lock_fd
from mcp_rl.settings import Settings
from mcp_rl.supervisor.launchers import JOB_STOP_MARGIN_S, launcher_for
from mcp_rl.supervisor.reconcile import STOPPER_LOCK, end_leftovers, job_of
from mcp_rl.supervisor.registry import Registry, RunRecord, registry_for
from mcp_rl.supervisor.states import TERMINAL_STATES, RunState, run_marker
from mcp_rl.supervisor.supervisor import Policy

log = logging.getLogger("mcp_rl.supervisor.stopper")
# After the scheduler was told to end a job: how long its end is waited for.
KILL_WAIT_JOB_S = 60.0


def finish(registry: Registry, run_id: str, policy: Policy, cause: str) -> RunState | None:
    """Wait (bounded) for a live supervisor to end the run, then end what is left; returns the
    final state."""
    run = registry.get_run(run_id)
    if run is None:
        return None
    if run.launcher not in (None, "local"):
        return _finish_job(registry, run, policy)
    supervisor = processes.prove(run.supervisor_pid, run.supervisor_create_time, run_marker(run.run_dir))
    if supervisor.alive:
        processes.continue_if_frozen(supervisor)

        def supervisor_done() -> bool:
            current = registry.get_run(run_id)
            ended = current is not None and current.state in TERMINAL_STATES
            return ended and not processes.is_alive(run.supervisor_pid, run.supervisor_create_time)

        if not processes.wait_until(supervisor_done, time.monotonic() + policy.total_stop_s()):
            log.warning(
                "run %s: the supervisor (pid %s) did not finish stopping in time; ending it", run_id, run.supervisor_pid
            )
    cleanup = end_leftovers(registry, run, policy, cause)
    for note in cleanup.left_alone:
        log.warning("run %s: %s", run_id, note)
    if cleanup.still_alive:
        log.error("run %s: pids %s still alive after SIGKILL", run_id, cleanup.still_alive)
    registry.transition(run_id, RunState.STOPPED, "stopped on request; no process left")
    final = registry.get_run(run_id)
    log.info("run %s: %s; ended pids %s", run_id, final.state if final else "?", cleanup.ended)
    return final.state if final else None


def _finish_job(registry: Registry, run: RunRecord, policy: Policy) -> RunState | None:
    """A cluster run: its full stop time for the job to end by itself after the gentle stop, then
    the scheduler ends it (Slurm: scancel; Ray: its stop, which kills after the job's grace)."""
    if run.job_id is None or run.launcher is None:
        registry.transition(run.run_id, RunState.STOPPED, "stopped on request; no job was submitted")
        final = registry.get_run(run.run_id)
        return final.state if final else None
    launcher = launcher_for(run.launcher, run.job_address)

    def job_ended() -> bool:
        return job_of(run, fresh=True).ended

    if not processes.wait_until(job_ended, time.monotonic() + policy.total_stop_s() + JOB_STOP_MARGIN_S):
        log.warning("run %s: %s job %s did not end in time; ending it", run.run_id, run.launcher, run.job_id)
        try:
            launcher.kill(run.job_id)
        except LaunchError as exc:
            log.error("run %s: %s", run.run_id, exc)
        processes.wait_until(job_ended, time.monotonic() + KILL_WAIT_JOB_S)
    info = job_of(run, fresh=True)
    registry.transition(run.run_id, RunState.STOPPED, f"stopped on request; {info.sentence()}")
    final = registry.get_run(run.run_id)
    log.info("run %s: %s; %s", run.run_id, final.state if final else "?", info.sentence())
    return final.state if final else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mcp_rl.supervisor.stopper", description=__doc__)
    parser.add_argument("--run-id", required=True)
    parser.add_argument("--cause", default="stopped on request (supervisor gone)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s stopper: %(message)s")
    redact.install_log_filter()  # no key in a log (mcp_rl.redact)
    redact.scrub_std_streams()  # nor in a traceback or a library's print
    settings = Settings.from_env()
    registry = registry_for(settings)
    run = registry.get_run(args.run_id)
    if run is None:
        log.error("no run %s in %s", args.run_id, settings.state_db)
        return 2
    with open(Path(run.run_dir) / STOPPER_LOCK, "a") as lock:
        if not lock_fd(lock.fileno(), wait=False):
            log.info("run %s: another stopper is at work; leaving it to that one", args.run_id)
            return 0
        finish(registry, args.run_id, Policy.from_settings(settings), args.cause)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
