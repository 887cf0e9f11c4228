"""The trainer's `/inference/v1/generate` (vLLM's token-in contract) as verifiers v1's train client
reads it. `contract_logprobs` applies, check for check, what `renderers.client` (0.1.x, which
verifiers 0.4.0's `TrainClient` calls) applies to every answer: one entry per completion token,
each named `"token_id:<id>"` of the same position, a finite number that is not vLLM's -9999
"no sampling evidence" sentinel. On a real (tiny, random) Llama through the local backend."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

VLLM_LOGPROB_SENTINEL = -9999.0


def contract_logprobs(choice: dict[str, Any]) -> list[float]:
    completion_ids = choice.get("token_ids") or []
    logprobs = choice.get("logprobs")
    assert isinstance(logprobs, dict), "choice.logprobs must be an object"
    content = logprobs.get("content")
    assert isinstance(content, list), "choice.logprobs.content must be a list"
    assert len(content) == len(completion_ids), "one logprob per completion token"
    out = []
    for index, entry in enumerate(content):
        assert isinstance(entry, dict)
        assert entry.get("token") == f"token_id:{completion_ids[index]}"
        value = entry.get("logprob")
        assert not isinstance(value, bool) and isinstance(value, (int, float))
        assert math.isfinite(float(value)) and float(value) != VLLM_LOGPROB_SENTINEL
        out.append(float(value))
    return out


@pytest.fixture(scope="module")
def served(tiny_model: Path) -> Iterator[tuple[str, Any]]:
    from mcp_rl.trainer.backends.local import LocalBackend
    from mcp_rl.trainer.inference_server import InferenceService, ServerThread, build_app
    from tests.kit.run_harness import free_port

    backend = LocalBackend(tiny_model, lora_rank=2, train=False)
    server = ServerThread(build_app(InferenceService(backend)), "127.0.0.1", free_port())
    server.start()
    try:
        yield f"http://127.0.0.1:{server.port}", backend
    finally:
        server.stop()


def test_token_in_generate_meets_the_verifiers_client_contract(served: tuple[str, Any]) -> None:
    import torch

    url, backend = served
    prompt = [5, 17, 42, 9, 33]
    body = {
        "model": backend.model_name,
        "token_ids": prompt,
        # What renderers sends: the caller's params plus stop ids, logprobs=1, skip_special_tokens.
        "sampling_params": {
            "max_tokens": 6,
            "temperature": 1.0,
            "top_p": 1.0,
            "n": 3,
            "stop_token_ids": [1],
            "logprobs": 1,
            "skip_special_tokens": False,
        },
    }
    reply = httpx.post(f"{url}/inference/v1/generate", json=body, timeout=60)
    assert reply.status_code == 200, reply.text
    data = reply.json()
    assert data["prompt_token_ids"] == prompt
    assert len(data["choices"]) == 3
    for choice in data["choices"]:
        ids = choice["token_ids"]
        assert 1 <= len(ids) <= 6
        assert choice["finish_reason"] in ("stop", "length")
        assert (choice["finish_reason"] == "stop") == (ids[-1] == 1)
        logprobs = contract_logprobs(choice)
        # The logprobs train exactly: the model's own log-softmax of each sampled token.
        with torch.no_grad():
            logits = backend.model(input_ids=torch.tensor([prompt + ids])).logits[0].float()
        expected = torch.log_softmax(logits[len(prompt) - 1 : -1], dim=-1)[torch.arange(len(ids)), torch.tensor(ids)]
        assert logprobs == pytest.approx(expected.tolist(), abs=1e-4)


def test_models_card_reports_the_context_and_bad_bodies_are_400(served: tuple[str, Any]) -> None:
    url, backend = served
    cards = httpx.get(f"{url}/v1/models", timeout=10).json()["data"]
    assert cards[0]["id"] == backend.model_name and cards[0]["max_model_len"] > 0
    assert httpx.post(f"{url}/inference/v1/generate", json={"token_ids": []}, timeout=10).status_code == 400
    assert httpx.post(f"{url}/inference/v1/generate", json={"sampling_params": {}}, timeout=10).status_code == 422
