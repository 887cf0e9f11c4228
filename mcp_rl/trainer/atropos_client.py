"""The trainer's side of the Atropos run-api: register, then poll `/batch` with deadlines.

Upstream polled `/batch` forever; here two deadlines turn a dead peer into a clear error:
`unreachable_timeout_s` (the API stopped answering) and `batch_wait_timeout_s` (the API answers
but no batch arrives: the environment is gone or stuck).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, cast

import httpx

log = logging.getLogger(__name__)


class AtroposError(RuntimeError):
    """The API or the environment behind it failed; the message says which and where to look."""


class AtroposClient:
    def __init__(
        self,
        base_url: str,
        *,
        unreachable_timeout_s: float = 60.0,
        batch_wait_timeout_s: float = 600.0,
        request_timeout_s: float = 10.0,
        poll_interval_s: float = 0.5,
        max_poll_interval_s: float = 4.0,
        batch_poll_interval_s: float = 0.05,
        max_batch_poll_interval_s: float = 0.5,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.unreachable_timeout_s = unreachable_timeout_s
        self.batch_wait_timeout_s = batch_wait_timeout_s
        self.poll_interval_s = poll_interval_s
        self.max_poll_interval_s = max_poll_interval_s
        # The trainer idles until it sees its batch, so /batch is polled finely (the API is on
        # loopback and answers in about a millisecond): backing off to 4 s as for an API that
        # does not answer cost a local run 1.3-2.4 s of each 7 s step.
        self.batch_poll_interval_s = batch_poll_interval_s
        self.max_batch_poll_interval_s = max_batch_poll_interval_s
        self._http = httpx.AsyncClient(base_url=self.base_url, timeout=request_timeout_s)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _request(self, method: str, path: str, stop: asyncio.Event | None, **kwargs: Any) -> Any:
        """One call, retried on connection errors until `unreachable_timeout_s` has passed."""
        first_failure: float | None = None
        delay = self.poll_interval_s
        while True:
            try:
                response = await self._http.request(method, path, **kwargs)
                response.raise_for_status()
                return response.json()
            except (httpx.TransportError, httpx.HTTPStatusError) as exc:
                now = time.monotonic()
                first_failure = first_failure or now
                if now - first_failure >= self.unreachable_timeout_s:
                    raise AtroposError(
                        f"the Atropos API at {self.base_url} has not answered {method} {path} for "
                        f"{now - first_failure:.0f} s (last error: {type(exc).__name__}: {exc}); "
                        "it has probably exited: see the run's logs/api.log"
                    ) from exc
                log.warning("Atropos API %s %s failed (%s); retrying", method, path, exc)
            if await _stopped(stop, delay):
                return None
            delay = min(delay * 2, self.max_poll_interval_s)

    async def register(self, payload: dict[str, Any], stop: asyncio.Event | None = None) -> dict[str, Any]:
        data = await self._request("POST", "/register", stop, json=payload)
        if data is None:
            raise AtroposError("stopped before registering with the Atropos API")
        return cast(dict[str, Any], data)

    async def get_batch(self, stop: asyncio.Event | None = None) -> list[dict[str, Any]] | None:
        """The next batch (a list of ScoredData groups), or None if `stop` was set meanwhile."""
        started = time.monotonic()
        delay = self.batch_poll_interval_s
        while True:
            data = await self._request("GET", "/batch", stop)
            if data is None:
                return None
            if data.get("status") == "error":
                raise AtroposError(
                    f"the Atropos API at {self.base_url} answered /batch with: {data.get('message')} "
                    "(it lost its state, e.g. it was restarted); the run cannot continue"
                )
            batch = data.get("batch")
            if batch:
                return list(batch)
            waited = time.monotonic() - started
            if waited >= self.batch_wait_timeout_s:
                raise AtroposError(
                    f"no batch from the environment in {waited:.0f} s (the Atropos API is up but its "
                    "queue stayed short of a batch): the environment process has probably exited or "
                    "is stuck: see the run's logs/env.log"
                )
            if await _stopped(stop, delay):
                return None
            delay = min(delay * 1.5, self.max_batch_poll_interval_s)


async def _stopped(stop: asyncio.Event | None, seconds: float) -> bool:
    """Sleep `seconds` unless `stop` is set first; True if it was."""
    if stop is None:
        await asyncio.sleep(seconds)
        return False
    try:
        await asyncio.wait_for(stop.wait(), timeout=seconds)
    except TimeoutError:
        return False
    return True
