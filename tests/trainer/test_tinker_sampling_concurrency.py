"""The inference server samples many requests at once for a remote backend (Tinker) and one at a
time for the local model; the trainer picks the limit from the backend and the settings."""

from __future__ import annotations

import threading
import time

import anyio
import httpx
import pytest

from mcp_rl.settings import Settings
from mcp_rl.trainer.backends.base import SampledSequence, Sampler, SamplingRequest
from mcp_rl.trainer.inference_server import InferenceService, build_app


class SlowSampler(Sampler):
    """Takes `delay_s` per request (like a remote service's latency) and counts overlaps."""

    model_name = "slow"

    def __init__(self, tokenizer, delay_s: float) -> None:
        self.tokenizer = tokenizer
        self.delay_s = delay_s
        self.in_flight = 0
        self.max_in_flight = 0
        self._lock = threading.Lock()

    def sample(self, request: SamplingRequest) -> list[SampledSequence]:
        with self._lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        time.sleep(self.delay_s)
        with self._lock:
            self.in_flight -= 1
        return [SampledSequence(tokens=[5, 1], logprobs=[-0.1, -0.2], finish_reason="stop")] * request.n


@pytest.fixture(scope="module")
def tokenizer(tiny_tokenizer: str):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_tokenizer)


async def _eight_requests(app) -> float:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
        started = time.monotonic()

        async def one() -> None:
            r = await http.post(
                "/generate", json={"input_ids": [3, 4], "sampling_params": {"n": 2, "max_new_tokens": 2}}
            )
            r.raise_for_status()

        async with anyio.create_task_group() as tg:
            for _ in range(8):
                tg.start_soon(one)
        return time.monotonic() - started


@pytest.mark.anyio
@pytest.mark.parametrize(("concurrency", "expected_overlap", "delay_s"), [(1, 1, 0.2), (32, 8, 1.0)])
async def test_sampling_concurrency_follows_the_setting(
    tokenizer, concurrency: int, expected_overlap: int, delay_s: float
) -> None:
    # Overlapped requests get a long delay, so that all eight are in flight together even on a
    # loaded machine; eight in turn would take 8 s.
    sampler = SlowSampler(tokenizer, delay_s=delay_s)
    elapsed = await _eight_requests(build_app(InferenceService(sampler), sampling_concurrency=concurrency))
    assert sampler.max_in_flight == expected_overlap
    if concurrency == 1:
        assert elapsed >= 8 * delay_s
    else:
        assert elapsed < 4 * delay_s


def test_the_remote_limit_is_a_setting_and_local_stays_serial() -> None:
    assert Settings.from_env({}).remote_sampling_concurrency == 32
    assert Settings.from_env({"MCP_RL_REMOTE_SAMPLING_CONCURRENCY": "4"}).remote_sampling_concurrency == 4
    with pytest.raises(ValueError, match="MCP_RL_REMOTE_SAMPLING_CONCURRENCY"):
        Settings.from_env({"MCP_RL_REMOTE_SAMPLING_CONCURRENCY": "0"})
    with pytest.raises(ValueError, match="MCP_RL_TINKER_CHECKPOINT_TTL"):
        Settings.from_env({"MCP_RL_TINKER_CHECKPOINT_TTL": "60"})
    assert Settings.from_env({"MCP_RL_TINKER_CHECKPOINT_TTL": "0"}).tinker_checkpoint_ttl_s is None
    from mcp_rl.trainer.backends.tinker import TinkerBackend

    assert TinkerBackend.remote and not Sampler.remote
