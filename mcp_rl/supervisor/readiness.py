"""Readiness probes with deadlines: never a fixed sleep.

A probe is a callable answering "ready yet?" quickly. `wait_ready` polls it until it says yes,
the process exits, a stop is requested or the deadline passes, and says which.
"""

from __future__ import annotations

import json as jsonlib
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from enum import StrEnum
from typing import Any

Probe = Callable[[], bool]

# Each probe request is short so a hung peer cannot stall the polling loop.
PROBE_TIMEOUT_S = 2.0


def http_ok(url: str, *, json: Any = None, timeout_s: float = PROBE_TIMEOUT_S) -> Probe:
    """Ready when `GET url` (with an optional JSON body) answers 200."""

    body = None if json is None else jsonlib.dumps(json).encode()
    headers = {} if json is None else {"Content-Type": "application/json"}

    def probe() -> bool:
        # urllib, not httpx: the supervisor starts faster without httpx's imports (~0.4 s).
        request = urllib.request.Request(url, data=body, headers=headers, method="GET")
        try:
            with urllib.request.urlopen(request, timeout=timeout_s) as response:
                return bool(response.status == 200)
        except (urllib.error.URLError, OSError, ValueError):
            return False

    return probe


def api_up(api_port: int) -> Probe:
    """The Atropos API answers `GET /status`."""
    return http_ok(f"http://127.0.0.1:{api_port}/status")


def trainer_serving(inference_port: int) -> Probe:
    """The trainer's inference server answers `GET /health`."""
    return http_ok(f"http://127.0.0.1:{inference_port}/health")


def env_registered(api_port: int, env_id: int = 0) -> Probe:
    """The environment registered with the API: `/status-env` only answers for known env ids.

    Each run has its own API with exactly one environment, so its id is 0.
    """
    return http_ok(f"http://127.0.0.1:{api_port}/status-env", json={"env_id": env_id})


class Outcome(StrEnum):
    READY = "ready"
    EXITED = "exited"
    DEADLINE = "deadline"
    ABORTED = "aborted"


def wait_ready(
    probe: Probe,
    *,
    deadline_s: float,
    exited: Callable[[], bool],
    abort: Callable[[], bool] = lambda: False,
    min_poll_s: float = 0.02,
    # A probe is one request on loopback (about a millisecond); a coarser poll showed up as
    # 0.2-0.6 s of a run's start-up spent after a process was ready and before it was seen so.
    max_poll_s: float = 0.1,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> Outcome:
    """Poll `probe` with a growing interval until ready, exited, aborted or past the deadline."""
    end = clock() + deadline_s
    interval = min_poll_s
    while True:
        if abort():
            return Outcome.ABORTED
        if probe():
            return Outcome.READY
        if exited():
            return Outcome.EXITED
        if clock() >= end:
            return Outcome.DEADLINE
        sleep(min(interval, max(0.0, end - clock())))
        interval = min(interval * 1.5, max_poll_s)
