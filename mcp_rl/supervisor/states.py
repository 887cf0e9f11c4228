"""The life cycle of a run and of each of its processes (stdlib only)."""

from __future__ import annotations

from enum import StrEnum


class RunState(StrEnum):
    STARTING = "starting"
    """Recorded, supervisor launched; the three processes are being brought up in order."""
    RUNNING = "running"
    """All three processes answered their readiness probes."""
    COMPLETED = "completed"
    """The trainer finished its last step and exited 0."""
    FAILED = "failed"
    """A process failed, hung, or the supervisor died; the cause says which and why."""
    STOPPING = "stopping"
    """A stop was requested; process groups are being ended env -> trainer -> API."""
    STOPPED = "stopped"
    """Stopped on request; nothing of the run is left."""


ACTIVE_STATES = frozenset({RunState.STARTING, RunState.RUNNING, RunState.STOPPING})
TERMINAL_STATES = frozenset({RunState.COMPLETED, RunState.FAILED, RunState.STOPPED})

# Which states each state may be entered from. A transition is a compare-and-set in the
# registry, so a supervisor and a reconciling server can never both win.
ALLOWED_FROM: dict[RunState, frozenset[RunState]] = {
    RunState.RUNNING: frozenset({RunState.STARTING}),
    RunState.COMPLETED: frozenset({RunState.RUNNING}),
    RunState.FAILED: frozenset({RunState.STARTING, RunState.RUNNING}),
    RunState.STOPPING: frozenset({RunState.STARTING, RunState.RUNNING}),
    RunState.STOPPED: frozenset({RunState.STOPPING}),
}


class ProcState(StrEnum):
    PENDING = "pending"
    """Not started yet (an earlier process is still coming up)."""
    STARTING = "starting"
    """Started, readiness probe not answered yet."""
    RUNNING = "running"
    """Ready."""
    EXITED = "exited"
    """Exited on its own; see exit_code."""
    STOPPED = "stopped"
    """Ended by the supervisor (stop request, or another process failed)."""


# The cause recorded when rl_stop_training (or `mcp-rl runs stop`) asks a run to stop; a stop
# the supervisor records for a signal from elsewhere (a scheduler's cancel) says "stop requested".
STOP_REQUESTED_CAUSE = "stop requested (rl_stop_training)"

# The three supervised processes, in start order; stopped in reverse.
PROCESS_NAMES = ("api", "trainer", "env")
# Log files of a run: the three processes plus the supervisor's own.
LOG_NAMES = (*PROCESS_NAMES, "supervisor")


def run_marker(run_dir: str) -> str:
    """The marker every process of a run carries in its environment (`MCP_RL_MARKER`).

    Its run folder: unique per run and per state directory. A process is signalled as the run's
    only when it carries this marker and its recorded pid and start time match.
    """
    return f"run:{run_dir}"  # = mcp_rl.processes.marker_for("run", run_dir); states.py stays stdlib-only
