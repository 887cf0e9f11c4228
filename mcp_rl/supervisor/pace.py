"""How often a detailed status check of a run is worth making: a fraction of the run's own length.

The original Hermes tool allowed one check per 30 minutes because a Tinker run takes hours. A
local run of a few minutes would then be seen once, after it ended. So the interval follows the
run: a tenth of its expected length (about ten detailed looks per run, whatever the backend),
never under MIN_INTERVAL_S and never over the configured ceiling (Settings.status_min_interval_s).
A run that has ended is never limited: nothing about it changes any more, so there is no
context to spare. The expected length comes from the pace measured so far (running time per
step times the steps planned); before the first step it is unknown, and start-up (where runs
fail) gets FIRST_STEP_INTERVAL_S.

No state here: the server keeps the time of each run's last detailed check in memory (a status
read writes nothing), see mcp_rl.server.training_tools.
"""

from __future__ import annotations

from dataclasses import dataclass

from mcp_rl.supervisor.models import RunStatus
from mcp_rl.supervisor.states import TERMINAL_STATES

# About this many detailed checks over a run's expected length.
CHECKS_PER_RUN = 10
MIN_INTERVAL_S = 30.0
FIRST_STEP_INTERVAL_S = 60.0


@dataclass(frozen=True)
class Interval:
    seconds: float
    why: str  # in words, for the rate-limited answer


def check_interval(status: RunStatus, ceiling_s: float) -> Interval:
    """The least time between two detailed checks of this run (0: not limited)."""
    if ceiling_s <= 0 or status.status in TERMINAL_STATES:
        return Interval(0.0, "runs that have ended are never limited")
    metrics = status.metrics
    step = metrics.step if metrics else None
    planned = metrics.num_steps if metrics else None
    if not step or not planned or step <= 0:
        seconds = min(ceiling_s, FIRST_STEP_INTERVAL_S)
        return Interval(seconds, f"one per {seconds:.0f} s until the first step")
    per_step_s = status.running_time_minutes * 60.0 / step
    expected_s = per_step_s * max(planned, step)
    seconds = min(ceiling_s, max(MIN_INTERVAL_S, expected_s / CHECKS_PER_RUN))
    return Interval(
        seconds,
        f"about {CHECKS_PER_RUN} per run (this one takes about {expected_s / 60:.0f} min at {per_step_s:.0f} s "
        f"per step, so one per {seconds:.0f} s)",
    )


class CheckLimiter:
    """When each run last had a detailed check, in this process's memory (never written)."""

    def __init__(self, ceiling_s: float) -> None:
        self.ceiling_s = ceiling_s
        self._last: dict[str, float] = {}

    def admit(self, status: RunStatus, now: float) -> tuple[float, str] | None:
        """None: give the full answer (and remember when); else (seconds to wait, why)."""
        interval = check_interval(status, self.ceiling_s)
        last = self._last.get(status.run_id)
        if interval.seconds > 0 and last is not None and now - last < interval.seconds:
            return interval.seconds - (now - last), interval.why
        self._last[status.run_id] = now
        return None
