"""Dynamic batching of the local sampler: requests that arrive together are sampled in one
batch, and a batch gives every sequence what sampling it alone gives (tokens at temperature 0,
logprobs within float tolerance), with the prompt cache still in use."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from mcp_rl.trainer.backends.base import SampledSequence, SamplingRequest
from mcp_rl.trainer.batcher import BatchingSampler
from tests.kit.wait import wait_for


class FakeBatchBackend:
    """Records the batches it is given; answers each request with its prompt's last token."""

    tokenizer = None
    model_name = "fake"

    def __init__(self, *, gate: threading.Event | None = None, fail_on: int | None = None) -> None:
        self.batches: list[list[SamplingRequest]] = []
        self.gate = gate
        self.fail_on = fail_on
        self.entered = threading.Event()

    def sample_batch(self, requests: list[SamplingRequest]) -> list[list[SampledSequence]]:
        self.batches.append(list(requests))
        self.entered.set()
        if self.gate is not None:
            assert self.gate.wait(5)
        if self.fail_on is not None and any(r.prompt_tokens[-1] == self.fail_on for r in requests):
            raise ValueError(f"bad prompt {self.fail_on}")
        return [
            [SampledSequence(tokens=[r.prompt_tokens[-1]], logprobs=[-0.5], finish_reason="stop")] * r.n
            for r in requests
        ]


def sample_concurrently(sampler: BatchingSampler, prompts: list[int], n: int = 1) -> dict[int, Any]:
    results: dict[int, Any] = {}

    def one(p: int) -> None:
        try:
            results[p] = sampler.sample(SamplingRequest(prompt_tokens=[p], n=n))
        except Exception as exc:
            results[p] = exc

    threads = [threading.Thread(target=one, args=(p,)) for p in prompts]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
        assert not t.is_alive()
    return results


def test_requests_arriving_together_are_one_batch_and_each_gets_its_own_answer():
    backend = FakeBatchBackend()
    sampler = BatchingSampler(backend, window_s=0.5, max_sequences=8)
    try:
        results = sample_concurrently(sampler, [1, 2, 3, 4], n=2)
    finally:
        sampler.close()
    # Four requests of two samples fill the 8 sequences at once: no waiting out the window.
    assert len(backend.batches) == 1 and sorted(r.prompt_tokens[0] for r in backend.batches[0]) == [1, 2, 3, 4]
    for p, seqs in results.items():
        assert [s.tokens for s in seqs] == [[p], [p]]
    stats = sampler.stats_snapshot()
    assert (stats.batches, stats.requests, stats.sequences, stats.largest) == (1, 4, 8, 4)
    metrics = sampler.step_metrics()
    assert metrics["sampler/batches"] == 1 and metrics["sampler/requests_per_batch"] == 4.0
    assert metrics["sampler/sequences"] == 8 and metrics["sampler/busy_s"] >= 0
    # Each step reports what happened since the previous one.
    assert sampler.step_metrics()["sampler/batches"] == 0


def test_requests_queue_while_a_batch_runs_and_a_batch_never_exceeds_max_sequences():
    gate = threading.Event()
    backend = FakeBatchBackend(gate=gate)
    sampler = BatchingSampler(backend, window_s=0.0, max_sequences=4)
    try:
        first = threading.Thread(target=sampler.sample, args=(SamplingRequest(prompt_tokens=[0], n=1),))
        first.start()
        assert backend.entered.wait(5)
        # While the first batch runs, five requests of two samples arrive.
        waiting = threading.Thread(target=sample_concurrently, args=(sampler, [1, 2, 3, 4, 5], 2))
        waiting.start()
        wait_for(lambda: len(sampler._pending) == 5, 5, "5 queued requests")
        gate.set()
        first.join(10)
        waiting.join(10)
    finally:
        sampler.close()
    sizes = [sum(r.n for r in batch) for batch in backend.batches]
    assert sizes[0] == 1 and all(s <= 4 for s in sizes) and sum(sizes) == 11
    assert len(backend.batches) == 4  # 1, then 2+2, 2+2, 2


def test_a_failing_request_fails_alone():
    backend = FakeBatchBackend(fail_on=2)
    sampler = BatchingSampler(backend, window_s=0.5, max_sequences=3)
    try:
        results = sample_concurrently(sampler, [1, 2, 3])
    finally:
        sampler.close()
    assert isinstance(results[2], ValueError)
    assert results[1][0].tokens == [1] and results[3][0].tokens == [3]


def test_closing_fails_waiting_requests_and_refuses_new_ones():
    gate = threading.Event()
    backend = FakeBatchBackend(gate=gate)
    sampler = BatchingSampler(backend, window_s=0.0, max_sequences=1)
    outcome: dict[str, Any] = {}

    def second() -> None:
        try:
            sampler.sample(SamplingRequest(prompt_tokens=[2]))
        except RuntimeError as exc:
            outcome["error"] = str(exc)

    first = threading.Thread(target=sampler.sample, args=(SamplingRequest(prompt_tokens=[1]),))
    first.start()
    assert backend.entered.wait(5)
    t = threading.Thread(target=second)
    t.start()
    wait_for(lambda: len(sampler._pending) == 1, 5, "the second request queued")
    sampler.close(timeout_s=0)
    t.join(5)
    gate.set()
    first.join(5)
    assert outcome["error"] == "the sampler is closed"
    with pytest.raises(RuntimeError, match="closed"):
        sampler.sample(SamplingRequest(prompt_tokens=[3]))


@pytest.mark.parametrize("window", [-1.0, 2.0, float("nan")])
def test_a_bad_window_is_refused(window):
    with pytest.raises(ValueError, match="window_s"):
        BatchingSampler(FakeBatchBackend(), window_s=window)


# --- the real model -------------------------------------------------------------------------
@pytest.fixture(scope="module")
def backend(default_model: Path):
    from mcp_rl.trainer.backends.local import LocalBackend

    return LocalBackend(default_model, lora_rank=4)


def chat(backend, question: str) -> list[int]:
    messages = [
        {"role": "system", "content": "You are a calculator. Reply with only the result."},
        {"role": "user", "content": question},
    ]
    text = backend.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return backend.tokenizer.encode(text, add_special_tokens=False)


@pytest.mark.slow  # loads the model
def test_a_batch_samples_what_each_request_samples_alone(backend):
    from mcp_rl.trainer.backends.prompt_cache import PromptCache

    # Prompts of different lengths (left padding), different n and max_tokens, one stop string.
    requests = [
        SamplingRequest(prompt_tokens=chat(backend, "3 + 4"), n=2, max_tokens=6, temperature=0.0),
        SamplingRequest(
            prompt_tokens=chat(backend, "What is 12 times 11? Think step by step."), n=3, max_tokens=9, temperature=0.0
        ),
        SamplingRequest(
            prompt_tokens=backend.tokenizer.encode("The capital of France is"),
            n=1,
            max_tokens=12,
            temperature=0.0,
            stop=["."],
        ),
    ]
    backend.prompt_cache = PromptCache()
    alone = [backend.sample(r) for r in requests]
    backend.prompt_cache = PromptCache()
    together = backend.sample_batch(requests)
    for request, a, b in zip(requests, alone, together, strict=True):
        assert len(b) == request.n
        for x, y in zip(a, b, strict=True):
            assert y.tokens == x.tokens and y.finish_reason == x.finish_reason
            assert y.logprobs == pytest.approx(x.logprobs, abs=2e-3)
            assert len(y.tokens) <= request.max_tokens
    # Both chat prompts share the system line: the second one's prefill reused the first's.
    assert backend.prompt_cache.reused_tokens > 0


@pytest.mark.slow  # loads the model
def test_seeded_requests_sample_the_same_alone_or_batched(backend):
    prompt = chat(backend, "Name a colour.")
    seeded = SamplingRequest(prompt_tokens=prompt, n=3, max_tokens=8, temperature=1.0, seed=7)
    other = SamplingRequest(prompt_tokens=chat(backend, "Name an animal."), n=4, max_tokens=3, temperature=1.0)
    alone = backend.sample(seeded)
    together = backend.sample_batch([other, seeded])
    assert [s.tokens for s in together[1]] == [s.tokens for s in alone]
    assert all(len(s.tokens) <= 3 for s in together[0])
    # Logprobs are of the sampled token under the model (not the temperature-scaled draw).
    assert all(lp <= 0 for s in together[0] + together[1] for lp in s.logprobs)


@pytest.mark.slow  # loads the model
def test_the_batcher_serves_concurrent_requests_from_the_real_backend(backend):
    sampler = BatchingSampler(backend, window_s=0.2, max_sequences=16)
    prompts = [chat(backend, f"{a} + {a}") for a in range(1, 5)]
    out: dict[int, Any] = {}

    def one(i: int) -> None:
        out[i] = sampler.sample(SamplingRequest(prompt_tokens=prompts[i], n=2, max_tokens=4, temperature=0.0))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(4)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
    finally:
        sampler.close()
    assert sampler.stats_snapshot().largest >= 2
    for i in range(4):
        (expected,) = backend.sample(SamplingRequest(prompt_tokens=prompts[i], n=1, max_tokens=4, temperature=0.0))
        assert [s.tokens for s in out[i]] == [expected.tokens, expected.tokens]


# --- sampling beside training ---------------------------------------------------------------
def test_readers_share_the_weights_and_a_writer_waits_for_them_and_holds_back_new_readers():
    from mcp_rl.trainer.backends.rwlock import ReadWriteLock

    lock = ReadWriteLock()
    events: list[str] = []
    first_in, release_first = threading.Event(), threading.Event()

    def reader(name: str, entered: threading.Event | None = None, release: threading.Event | None = None) -> None:
        with lock.shared():
            events.append(f"{name} in")
            if entered is not None:
                entered.set()
            if release is not None:
                assert release.wait(5)
            events.append(f"{name} out")

    def writer() -> None:
        with lock.exclusive():
            events.append("writer")

    r1 = threading.Thread(target=reader, args=("r1", first_in, release_first))
    r1.start()
    assert first_in.wait(5)
    # A second reader shares the lock with the first (sampling beside gradients).
    r2 = threading.Thread(target=reader, args=("r2",))
    r2.start()
    r2.join(5)
    assert events == ["r1 in", "r2 in", "r2 out"]
    w = threading.Thread(target=writer)
    w.start()
    wait_for(lambda: lock._writers_waiting == 1, 5, "the writer waiting")
    # The optimizer step is waiting: a new sample waits behind it, not beside the reader.
    r3 = threading.Thread(target=reader, args=("r3",))
    r3.start()
    with pytest.raises(AssertionError, match="r3 to get in"):
        wait_for(lambda: "r3 in" in events, 0.1, "r3 to get in")
    assert "writer" not in events
    release_first.set()
    for t in (r1, w, r3):
        t.join(5)
        assert not t.is_alive()
    assert events[3:] == ["r1 out", "writer", "r3 in", "r3 out"]


# --- through the inference server -----------------------------------------------------------
class FakeTokenizer:
    def decode(self, tokens: list[int], **_: Any) -> str:
        return " ".join(str(t) for t in tokens)


def test_a_request_whose_client_left_while_queued_is_never_sampled():
    """Atropos cancels its workers when its queue is full: what they asked for and no longer
    wait for must not be sampled (the CPU goes to the trainer)."""
    import httpx

    from mcp_rl.trainer.inference_server import (
        InferenceService,
        ServerThread,
        build_app,
    )
    from tests.kit.run_harness import free_port

    gate = threading.Event()
    backend = FakeBatchBackend(gate=gate)
    backend.tokenizer = FakeTokenizer()
    sampler = BatchingSampler(backend, window_s=0.0, max_sequences=4)
    server = ServerThread(
        build_app(InferenceService(sampler), sampling_concurrency=sampler.max_requests), "127.0.0.1", free_port()
    )
    server.start()
    url = f"http://127.0.0.1:{server.port}/generate"
    try:
        first: dict[str, Any] = {}
        held = threading.Thread(
            target=lambda: first.update(reply=httpx.post(url, json={"input_ids": [1]}, timeout=10).json())
        )
        held.start()
        assert backend.entered.wait(5)
        # This client gives up while its request waits behind the first batch.
        with pytest.raises(httpx.TimeoutException):
            httpx.post(url, json={"input_ids": [2]}, timeout=0.3)
        wait_for(lambda: sampler._pending and sampler._pending[0].abandoned(), 5, "the queued request abandoned")
        gate.set()
        held.join(10)
        assert first["reply"]["output_ids"] == [1]
        # A later request is served as usual, and the abandoned one never reached the model.
        assert httpx.post(url, json={"input_ids": [3]}, timeout=10).json()["output_ids"] == [3]
        assert [r.prompt_tokens for batch in backend.batches for r in batch] == [[1], [3]]
    finally:
        gate.set()
        server.stop()
        sampler.close()
