"""A call waiting on a job looks soon, then less often: a job that ends in milliseconds (a cache
read) is answered in milliseconds, a long one is looked at every POLL_S, never past the budget."""

from __future__ import annotations

import pytest

from mcp_rl.server import budget
from mcp_rl.server.budget import POLL_S, CallBudget, Job, wait_job

pytestmark = pytest.mark.anyio


def _sleeps_until_done(monkeypatch: pytest.MonkeyPatch, job: Job, looks: int) -> list[float]:
    """Replace the wait's sleep: record each pause, the job ends after `looks` of them."""
    pauses: list[float] = []

    async def sleep(seconds: float) -> None:
        pauses.append(seconds)
        if len(pauses) == looks:
            job.done.set()

    monkeypatch.setattr(budget.anyio, "sleep", sleep)
    return pauses


async def test_first_looks_come_within_milliseconds(monkeypatch: pytest.MonkeyPatch) -> None:
    job = Job(key="k", what="a cache read")
    pauses = _sleeps_until_done(monkeypatch, job, looks=3)
    assert await wait_job(job, CallBudget(45.0))
    assert pauses == [0.002, 0.004, 0.008]


async def test_a_long_job_is_looked_at_every_poll_interval(monkeypatch: pytest.MonkeyPatch) -> None:
    job = Job(key="k", what="a slow import")
    pauses = _sleeps_until_done(monkeypatch, job, looks=12)
    assert await wait_job(job, CallBudget(45.0))
    assert max(pauses) == POLL_S and pauses[-4:] == [POLL_S] * 4
    assert pauses == sorted(pauses)


async def test_a_finished_job_is_not_waited_for(monkeypatch: pytest.MonkeyPatch) -> None:
    job = Job(key="k", what="done already")
    job.done.set()
    pauses = _sleeps_until_done(monkeypatch, job, looks=1)
    assert await wait_job(job, CallBudget(45.0))
    assert pauses == []


async def test_the_wait_ends_with_the_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    job = Job(key="k", what="never ends")
    spent = CallBudget(45.0)
    spent.deadline = spent.started  # nothing left
    pauses = _sleeps_until_done(monkeypatch, job, looks=10**6)
    assert not await wait_job(job, spent)
    assert pauses == []
