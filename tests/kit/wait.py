"""Waiting in tests: poll a condition with a deadline, never a fixed sleep. The wait helper of the
supervisor, trainer and Tinker tests; a new test that waits uses it."""

from __future__ import annotations

import asyncio
import inspect
import socket
import subprocess
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol, TypeVar

T = TypeVar("T")


class WaitTimeout(AssertionError):
    """The deadline passed before the condition held (a test that reads the last state itself
    catches this, and only this: an assertion inside the condition still fails the test)."""


class Watched(Protocol):
    """A child process a wait gives up on as soon as it exits (tests/kit/run_harness.py `Proc`)."""

    name: str
    popen: subprocess.Popen[bytes]

    def alive(self) -> bool: ...

    def tail(self, n: int = 40) -> str: ...


def wait_for(
    condition: Callable[[], T],
    timeout: float,
    what: str,
    *,
    interval: float | None = None,
    watch: Sequence[Watched] = (),
) -> T:
    """Poll `condition` until it returns something truthy and return that. Fails (AssertionError
    naming `what`) after `timeout` seconds, or at once when a `watch`ed process has exited, with
    the tail of its log. Polls every 0.05 s, or 0.2 s while watching processes: a probe (an HTTP
    client each time) takes CPU from the processes it waits for."""
    interval = interval if interval is not None else (0.2 if watch else 0.05)
    end = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        for proc in watch:
            if not proc.alive():
                raise AssertionError(
                    f"{proc.name} exited ({proc.popen.returncode}) while waiting for {what}:\n{proc.tail()}"
                )
        if time.monotonic() > end:
            tails = "".join(f"\n--- {p.name}\n{p.tail()}" for p in watch)
            raise WaitTimeout(f"timed out after {timeout} s waiting for {what}{tails}")
        time.sleep(interval)


def listening(host: str, port: int) -> bool:
    """Whether something accepts TCP connections at host:port: a readiness probe for `wait_for`."""
    try:
        socket.create_connection((host, port), timeout=1).close()
    except OSError:
        return False
    return True


async def wait_for_async(
    condition: Callable[[], Awaitable[T]] | Callable[[], T],
    timeout: float,
    what: str,
    *,
    interval: float = 0.1,
    task: asyncio.Task[Any] | None = None,
) -> T:
    """`wait_for` inside an event loop, for a condition that is awaited (an async function) or
    plain (a lambda): the loop keeps running between polls. Fails at once if `task` (the trainer
    under test) ended first."""
    end = time.monotonic() + timeout
    while True:
        if task is not None and task.done():
            raise AssertionError(f"the task ended with {task.result()} while waiting for {what}")
        value = condition()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if time.monotonic() > end:
            raise WaitTimeout(f"timed out after {timeout} s waiting for {what}")
        await asyncio.sleep(interval)
