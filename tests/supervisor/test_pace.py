"""The status rate limit follows the run: a tenth of its expected length, 30 s to the ceiling;
a run that has ended is never limited."""

from __future__ import annotations

import pytest

from mcp_rl.supervisor.models import RunMetrics, RunStatus
from mcp_rl.supervisor.pace import CheckLimiter, check_interval
from mcp_rl.supervisor.states import RunState


def _status(state: RunState, minutes: float, step: int | None, planned: int | None, run_id: str = "r1") -> RunStatus:
    metrics = RunMetrics(step=step, num_steps=planned) if step is not None or planned is not None else None
    return RunStatus(
        run_id=run_id,
        status=state,
        environment="arithmetic",
        backend="local",
        running_time_minutes=minutes,
        metrics=metrics,
        created_at=0.0,
        message="",
    )


@pytest.mark.parametrize(
    ("minutes", "step", "planned", "expected_s"),
    [
        (1.0, 10, 30, 30.0),  # a 3-minute local run: the 30 s floor, not 30 min
        (20.0, 10, 60, 720.0),  # a 2-hour run: a tenth of it
        (200.0, 10, 100, 1800.0),  # a 33-hour run: the ceiling
        (0.5, None, None, 60.0),  # before the first step: start-up's interval
        (0.5, 0, 30, 60.0),
    ],
)
def test_the_interval_is_a_tenth_of_the_expected_run_within_bounds(minutes, step, planned, expected_s) -> None:
    interval = check_interval(_status(RunState.RUNNING, minutes, step, planned), ceiling_s=1800)
    assert interval.seconds == pytest.approx(expected_s)


def test_ended_runs_and_a_zero_ceiling_are_never_limited() -> None:
    for state in (RunState.COMPLETED, RunState.FAILED, RunState.STOPPED):
        assert check_interval(_status(state, 1.0, 3, 30), 1800).seconds == 0
    assert check_interval(_status(RunState.RUNNING, 1.0, 3, 30), 0).seconds == 0


def test_the_limiter_admits_once_per_interval_and_every_check_of_an_ended_run() -> None:
    limiter = CheckLimiter(1800)
    running = _status(RunState.RUNNING, 1.0, 10, 30)
    assert limiter.admit(running, now=100.0) is None
    wait, why = limiter.admit(running, now=110.0)
    assert wait == pytest.approx(20.0) and "30 s" in why
    assert limiter.admit(running, now=131.0) is None
    done = _status(RunState.COMPLETED, 3.0, 30, 30)
    assert all(limiter.admit(done, now=132.0 + i) is None for i in range(3))
    # Per run: another run's check is its own.
    assert limiter.admit(_status(RunState.RUNNING, 1.0, 10, 30, run_id="r2"), now=132.0) is None
