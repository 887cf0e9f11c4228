"""Dynamic batching for the local sampler: requests that arrive together are sampled together.

An environment's rollout workers each ask for one group at a time, and they ask at nearly the
same moment (a batch's groups are requested by several workers at once, and after each answer
the next request follows within milliseconds). Sampled one by one, each group pays for its own
decode loop; every decode step reads all the weights, so one step of 32 rows costs far less
than eight of 4, and the groups waiting together are handed to the backend's `sample_batch` in
one call.

The batcher is a `Sampler` around the backend: callers (the inference server's worker threads)
block in `sample()` while one collector thread gathers what is waiting -- for at most
`window_s` after the first request, or until `max_sequences` samples are waiting -- and runs
the batch. While a batch runs, new requests queue up and form the next one.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from contextvars import ContextVar
from dataclasses import dataclass, replace
from typing import Any, Protocol, runtime_checkable

from mcp_rl.settings import Settings
from mcp_rl.trainer.backends.base import SampledSequence, Sampler, SamplingRequest

log = logging.getLogger(__name__)

# Set by the inference server around the request a worker thread serves: says whether its
# client is still there. A request whose client left while it waited is never sampled (Atropos
# cancels its workers whenever its queue is full; sampling for nobody takes the CPU from the
# trainer).
still_wanted: ContextVar[Callable[[], bool] | None] = ContextVar("still_wanted", default=None)


class RequestAbandoned(Exception):
    """The request's client left before its batch started."""


@runtime_checkable
class BatchSampling(Protocol):
    tokenizer: Any
    model_name: str

    def sample_batch(self, requests: list[SamplingRequest]) -> list[list[SampledSequence]]: ...

    def top_logprobs(self, prompt: list[int], completion: list[int], k: int) -> list[list[tuple[int, float]]]: ...


@dataclass
class BatcherStats:
    """What the batcher did (for benches, tests and the trainer's metrics)."""

    batches: int = 0
    requests: int = 0
    sequences: int = 0
    busy_s: float = 0.0
    largest: int = 0  # requests in the largest batch


@dataclass
class _Pending:
    request: SamplingRequest
    future: Future[list[SampledSequence]]
    arrived: float
    wanted: Callable[[], bool] | None = None

    def abandoned(self) -> bool:
        return self.wanted is not None and not self.wanted()


class BatchingSampler(Sampler):
    """`sample()` from many threads at once; the backend sees one `sample_batch` per batch."""

    def __init__(self, backend: BatchSampling, *, window_s: float = 0.05, max_sequences: int = 64) -> None:
        if not window_s >= 0 or window_s > 1.0:
            raise ValueError("window_s must be between 0 and 1 second")
        if max_sequences < 1:
            raise ValueError("max_sequences must be at least 1")
        self.backend = backend
        self.tokenizer = backend.tokenizer
        self.model_name = backend.model_name
        self.window_s = window_s
        self.max_sequences = max_sequences
        self.stats = BatcherStats()
        self._reported = BatcherStats()
        self._pending: list[_Pending] = []
        self._cond = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._collect, name="sampling-batcher", daemon=True)
        self._thread.start()

    @property
    def max_requests(self) -> int:
        """The most requests one batch can hold (each asks for at least one sample): how many
        the inference server should let through to `sample()` at once."""
        return self.max_sequences

    def top_logprobs(self, prompt: list[int], completion: list[int], k: int) -> list[list[tuple[int, float]]]:
        """Straight to the backend: one forward, rare (asked for by a client), not batched."""
        return self.backend.top_logprobs(prompt, completion, k)

    def sample(self, request: SamplingRequest) -> list[SampledSequence]:
        future: Future[list[SampledSequence]] = Future()
        with self._cond:
            if self._closed:
                raise RuntimeError("the sampler is closed")
            self._pending.append(_Pending(request, future, time.monotonic(), still_wanted.get()))
            self._cond.notify_all()
        return future.result()

    def stats_snapshot(self) -> BatcherStats:
        with self._cond:
            return replace(self.stats)

    def step_metrics(self) -> dict[str, float]:
        """What the sampler did since the previous call (the trainer logs it every step)."""
        with self._cond:
            now, before = replace(self.stats), self._reported
            self._reported = now
        batches = now.batches - before.batches
        return {
            "sampler/batches": batches,
            "sampler/requests_per_batch": (now.requests - before.requests) / batches if batches else 0.0,
            "sampler/sequences": now.sequences - before.sequences,
            "sampler/busy_s": now.busy_s - before.busy_s,
        }

    def close(self, timeout_s: float = 5.0) -> None:
        """Stop collecting; requests still waiting fail at once (nobody will sample them)."""
        with self._cond:
            self._closed = True
            waiting, self._pending = self._pending, []
            self._cond.notify_all()
        for item in waiting:
            item.future.set_exception(RuntimeError("the sampler is closed"))
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout_s)

    # --- the collector thread ---------------------------------------------------------------
    def _take(self) -> list[_Pending] | None:
        """The next batch (None once closed): wait for a first request, then up to `window_s`
        for company, drop the requests whose clients left, and take what fits in
        `max_sequences` (at least one request when any is left)."""
        with self._cond:
            while not self._pending and not self._closed:
                self._cond.wait()
            if self._closed:
                return None
            deadline = self._pending[0].arrived + self.window_s
            while not self._closed and self._waiting_sequences() < self.max_sequences:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
            for item in [p for p in self._pending if p.abandoned()]:
                self._pending.remove(item)
                item.future.set_exception(RequestAbandoned("the client left before sampling began"))
            batch: list[_Pending] = []
            total = 0
            while self._pending:
                n = max(1, self._pending[0].request.n)
                if batch and total + n > self.max_sequences:
                    break
                batch.append(self._pending.pop(0))
                total += n
            return batch

    def _waiting_sequences(self) -> int:
        return sum(max(1, p.request.n) for p in self._pending)

    def _collect(self) -> None:
        try:
            while (batch := self._take()) is not None:
                if batch:  # empty when every waiting request was abandoned
                    self._run(batch)
        finally:
            # Whatever ended this thread, no caller is left waiting on a batch nobody will run.
            self.close(timeout_s=0)

    def _run(self, batch: list[_Pending]) -> None:
        started = time.monotonic()
        try:
            results = self.backend.sample_batch([p.request for p in batch])
        except Exception as exc:
            if len(batch) == 1:
                batch[0].future.set_exception(exc)
                return
            # One bad request must not fail the others: each is tried on its own.
            log.warning("a batch of %d sampling requests failed; sampling them one by one", len(batch), exc_info=True)
            for item in batch:
                self._run([item])
            return
        self._record(batch, time.monotonic() - started)
        for item, result in zip(batch, results, strict=True):
            item.future.set_result(result)

    def _record(self, batch: list[_Pending], seconds: float) -> None:
        with self._cond:
            s = self.stats
            s.batches += 1
            s.requests += len(batch)
            s.sequences += sum(max(1, p.request.n) for p in batch)
            s.busy_s += seconds
            s.largest = max(s.largest, len(batch))


def batching_sampler(backend: BatchSampling, settings: Settings) -> BatchingSampler:
    """The local sampler as the trainer serves it (the bench builds it the same way)."""
    return BatchingSampler(
        backend, window_s=settings.local_batch_window_s, max_sequences=settings.local_batch_max_sequences
    )
