"""When an environment's failures end a run, and when they only get counted (issue 34)."""

from __future__ import annotations

from mcp_rl.rundir import EnvError, EnvHealth
from mcp_rl.supervisor.env_watch import hopeless

ERROR = EnvError(type="ZeroDivisionError", message="division by zero", where="my_env.py:12 in score", time=100.0)


def health(**fields: object) -> EnvHealth:
    return EnvHealth(last_error=ERROR, first_failure_at=100.0, **fields)


def test_the_same_exception_on_group_after_group_ends_the_run_naming_it() -> None:
    cause = hopeless(health(groups_failed=8, streak=8), now=105.0, streak_limit=8, no_score_s=60)
    assert cause is not None
    assert "ZeroDivisionError: division by zero (raised at my_env.py:12 in score) on 8 groups in a row" in cause
    assert "0 groups scored" in cause


def test_no_group_scored_long_after_the_first_failure_ends_the_run() -> None:
    h = health(groups_failed=3, streak=1)
    assert hopeless(h, now=150.0, streak_limit=8, no_score_s=60) is None
    cause = hopeless(h, now=161.0, streak_limit=8, no_score_s=60)
    assert cause is not None and "no group was scored in 61 s (3 failed)" in cause


def test_a_few_bad_items_among_scored_ones_end_nothing() -> None:
    h = health(groups_failed=5, groups_scored=40, streak=2)
    assert hopeless(h, now=10_000.0, streak_limit=8, no_score_s=60) is None
    assert hopeless(EnvHealth(groups_scored=10), now=10_000.0, streak_limit=8, no_score_s=60) is None
    assert hopeless(None, now=10_000.0, streak_limit=8, no_score_s=60) is None
