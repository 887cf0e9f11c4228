"""Time budgets for tool calls, and the blocking work that outlives a call.

Hosts cancel tool calls early (Claude Desktop after about 60 s, Hermes after 120 s), and a
cancelled call loses its answer while its work goes on. So every tool answers within
`Settings.tool_time_budget_s`: slow work (importing an environment, stopping a run, cancelling a
smoke test) runs in a `Job` on a daemon thread, the call waits for it until its budget is spent,
and a later call with the same key joins the job still in flight or collects its outcome.

A call answered by an MCP task (server/mcp_tasks.py: the client declared the tasks extension)
waits for none of the background job it starts: `job_wait_s` is 0 there, and the task answers
for the job from then on.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import anyio
from mcp.server.mcpserver import Context

# Kept back from the budget to build and send the answer after the last wait.
ANSWER_MARGIN_S = 3.0
# How often a waiting call looks at its job (and may send a progress notification). The first
# looks come sooner: most jobs are cache reads that end within milliseconds, and a call that
# slept a whole POLL_S for each of them was 100-200 ms slower than its work.
POLL_S = 0.1
FIRST_POLL_S = 0.002
PROGRESS_EVERY_S = 2.0
# A finished job nobody collected is forgotten after this long (its effect is on disk anyway).
UNCOLLECTED_TTL_S = 600.0

# Set for the duration of a tools/call that an MCP task answers (server/mcp_tasks.py).
TASK_CALL: ContextVar[bool] = ContextVar("mcp_rl_task_call", default=False)


class CallBudget:
    """The time one tool call may still spend before it must answer."""

    def __init__(self, budget_s: float) -> None:
        self.budget_s = budget_s
        self.started = time.monotonic()
        # Small budgets (tests) keep half of themselves for the work, never less.
        self.deadline = self.started + max(budget_s - ANSWER_MARGIN_S, budget_s / 2)

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def remaining(self) -> float:
        return max(0.0, self.deadline - time.monotonic())

    def job_wait_s(self) -> float:
        """How long the call may wait for the background job it started: the rest of its budget,
        or nothing when an MCP task answers the call (the task follows the job instead)."""
        return 0.0 if TASK_CALL.get() else self.remaining()

    def part(self, seconds: float) -> CallBudget:
        """A budget ending `seconds` from now, or with this one, whichever comes first."""
        part = CallBudget(self.budget_s)
        part.started = self.started
        part.deadline = min(self.deadline, time.monotonic() + seconds)
        return part


class Progress:
    """Progress notifications for one call (a no-op when the client sent no progress token).

    Progress is the seconds spent so far out of the budget, unless the caller counts something
    better (steps, groups); values only ever increase, as the protocol requires.
    """

    def __init__(self, ctx: Context | None, budget: CallBudget) -> None:
        self._ctx = ctx
        self._budget = budget
        self._last = -1.0
        self._last_sent_at = 0.0

    async def report(self, message: str, progress: float | None = None, total: float | None = None) -> None:
        if self._ctx is None:
            return
        if progress is None:
            progress, total = round(self._budget.elapsed(), 1), self._budget.budget_s
        if progress <= self._last:
            return
        self._last = progress
        self._last_sent_at = time.monotonic()
        await self._ctx.report_progress(progress, total, message)

    def due(self) -> bool:
        """Whether a heartbeat is due: at most one every PROGRESS_EVERY_S, none without a client
        listening (so a heartbeat's message is not worked out for nobody)."""
        return self._ctx is not None and time.monotonic() - self._last_sent_at >= PROGRESS_EVERY_S

    async def tick(self, message: str) -> None:
        """A heartbeat at most every PROGRESS_EVERY_S while waiting on something slow."""
        if self.due():
            await self.report(message)


@dataclass
class Job:
    """Blocking work on a daemon thread: its outcome is kept until a call collects it."""

    key: str
    what: str
    started_at: float = field(default_factory=time.time)
    done: threading.Event = field(default_factory=threading.Event)
    finished_at: float | None = None
    result: Any = None
    error: BaseException | None = None
    # Set to ask the work to stop (work that can be cancelled watches it, e.g. a validation).
    cancel: threading.Event = field(default_factory=threading.Event)

    def running_for(self) -> float:
        return (self.finished_at or time.time()) - self.started_at

    def outcome(self) -> Any:
        if self.error is not None:
            raise self.error
        return self.result


class Jobs:
    """Jobs of one server by key, so a repeated call joins the work in flight instead of
    starting it twice. Threads are daemons: work with effects outside this process (a stop
    already signalled) carries on by itself if the server exits."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._jobs: dict[str, Job] = {}

    def start(self, key: str, what: str, fn: Callable[[], Any], cancel: threading.Event | None = None) -> Job:
        """The job under `key`: the one in flight, or one that finished and is not collected yet
        (so a failure reaches the next call, which then forgets it), else a new one."""
        with self._lock:
            existing = self._jobs.get(key)
            if existing is not None and not self._stale(existing):
                return existing
            job = self._jobs[key] = Job(key=key, what=what, cancel=cancel or threading.Event())

        def run() -> None:
            try:
                job.result = fn()
            except BaseException as exc:
                job.error = exc
            finally:
                job.finished_at = time.time()
                job.done.set()

        threading.Thread(target=run, name=f"job-{key}", daemon=True).start()
        return job

    def get(self, key: str) -> Job | None:
        with self._lock:
            job = self._jobs.get(key)
            return None if job is None or self._stale(job) else job

    def forget(self, job: Job) -> None:
        """Drop a collected job (only if it is still the one under its key)."""
        with self._lock:
            if self._jobs.get(job.key) is job:
                del self._jobs[job.key]

    @staticmethod
    def _stale(job: Job) -> bool:
        return job.finished_at is not None and time.time() - job.finished_at > UNCOLLECTED_TTL_S


async def wait_job(
    job: Job, budget: CallBudget, progress: Progress | None = None, describe: Callable[[], str] | None = None
) -> bool:
    """Wait for `job` until the call's budget is spent; True when it has finished. Heartbeats say
    what `describe` says (read on a worker thread: it may touch the disk), else how long the job
    has run."""
    pause = FIRST_POLL_S
    while not job.done.is_set():
        left = budget.remaining()
        if left <= 0:
            return False
        await anyio.sleep(min(pause, left))
        pause = min(pause * 2, POLL_S)
        if progress is not None and progress.due():
            if describe is None:
                await progress.report(f"{job.what} ({job.running_for():.0f} s)")
            else:
                await progress.report(await anyio.to_thread.run_sync(describe))
    return True


async def run_within(
    jobs: Jobs,
    key: str,
    what: str,
    fn: Callable[[], Any],
    budget: CallBudget,
    progress: Progress | None = None,
    cancel: threading.Event | None = None,
) -> tuple[bool, Any, Job]:
    """Run (or join) the job `key` and wait within the budget. `cancel`: the event the work
    watches, kept as the new job's `cancel` (a joined job keeps its own).

    Returns (finished, result, job); a finished job is forgotten and its error raised here.
    """
    job = jobs.start(key, what, fn, cancel)
    if not await wait_job(job, budget, progress):
        return False, None, job
    jobs.forget(job)
    return True, job.outcome(), job
