"""When an environment that keeps raising has made a run hopeless (read from env_health.json).

Atropos retries a failing item forever, so without this a run whose environment raises on every
group stays `running` at step 0 until someone stops it. A run is ended when either
- the same exception, at the same place, ended `streak_limit` groups in a row, or
- no group was scored at all `no_score_s` after the first failure (different exceptions).
A few bad items among scored ones end nothing: they are counted and shown in the status.
"""

from __future__ import annotations

from mcp_rl.rundir import EnvHealth


def hopeless(health: EnvHealth | None, now: float, streak_limit: int, no_score_s: float) -> str | None:
    """The cause to end the run with, or None while it can still progress."""
    if health is None or health.last_error is None or not health.groups_failed:
        return None
    error = health.last_error
    if health.streak >= streak_limit:
        why = f"on {health.streak} groups in a row"
    elif (
        not health.groups_scored and health.first_failure_at is not None and now - health.first_failure_at > no_score_s
    ):
        why = f"and no group was scored in {now - health.first_failure_at:.0f} s ({health.groups_failed} failed)"
    else:
        return None
    return (
        f"the environment raised {error.sentence()} {why}; {health.groups_scored} groups scored in all. "
        "Atropos would retry it forever, so the run was ended: fix the environment (smoke-test it with "
        "rl_test_inference) and start again. The traceback is under environment_errors in rl_check_status."
    )
