"""The local sampler's prompt cache: the next turn of an episode reuses the KV cache of the
previous one, gives what a cold prefill gives, and is never used across a weight change."""

from __future__ import annotations

from pathlib import Path

import pytest

from mcp_rl.trainer.backends.base import AdamParams, SamplingRequest, TrainingExample
from mcp_rl.trainer.backends.prompt_cache import MIN_SHARED_TOKENS, PromptCache, shared_prefix

INSTRUCTIONS = (
    "<|im_start|>user\nYou are playing Guess The Number.\nYou have to guess the number between 1 and 10 "
    "(inclusive) within 4 turns.\nAs you enter your guess, the game will provide you with hints.\n"
)
TURN_2 = "At turn 1, you guessed 5, and the target number is higher than 5.\n"


@pytest.fixture(scope="module")
def backend(default_model: Path):
    from mcp_rl.trainer.backends.local import LocalBackend

    return LocalBackend(default_model, lora_rank=4)


def tokens(backend, text: str) -> list[int]:
    return backend.tokenizer.encode(text, add_special_tokens=False)


def greedy(backend, prompt: list[int], n: int = 1):
    return backend.sample(SamplingRequest(prompt_tokens=prompt, max_tokens=6, temperature=0.0, n=n))


def test_shared_prefix():
    assert shared_prefix([1, 2, 3], [1, 2, 4, 5]) == 2
    assert shared_prefix([], [1]) == 0
    assert shared_prefix([7, 8], [7, 8]) == 2


@pytest.mark.slow  # loads the model
def test_extending_a_cached_prompt_reuses_it_and_samples_as_a_cold_prefill(backend):
    short = tokens(backend, INSTRUCTIONS)
    long = tokens(backend, INSTRUCTIONS + TURN_2 + "Enter your next guess.<|im_end|>\n<|im_start|>assistant\n")
    assert long[: len(short)] == short and len(short) >= MIN_SHARED_TOKENS

    backend.prompt_cache = PromptCache()
    (cold,) = greedy(backend, long)
    assert backend.prompt_cache.reused_tokens == 0

    backend.prompt_cache = PromptCache()
    greedy(backend, short)
    (warm,) = greedy(backend, long)
    assert backend.prompt_cache.reused_tokens == len(short)
    assert warm.tokens == cold.tokens
    assert warm.logprobs == pytest.approx(cold.logprobs, abs=1e-4)

    # The very same prompt again: all but its last token come from the cache; n > 1 still works.
    samples = greedy(backend, long, n=3)
    assert backend.prompt_cache.reused_tokens == len(short) + len(long) - 1
    assert all(s.tokens == cold.tokens for s in samples)


@pytest.mark.slow  # loads the model
def test_a_weight_change_invalidates_every_cached_prompt(backend):
    prompt = tokens(backend, INSTRUCTIONS + TURN_2)
    backend.prompt_cache = PromptCache()
    (before,) = greedy(backend, prompt)

    # One optimizer step on a sequence pushing its sampled tokens up.
    seq = prompt + before.tokens
    trained = [False] * (len(prompt) - 1) + [True] * len(before.tokens)
    example = TrainingExample(
        input_tokens=seq[:-1],
        target_tokens=seq[1:],
        advantages=[1.0 if t else 0.0 for t in trained],
        sampling_logprobs=None,
        trained=trained,
    )
    backend.forward_backward([example])
    backend.optim_step(AdamParams(learning_rate=1e-2))

    reused = backend.prompt_cache.reused_tokens
    (after,) = greedy(backend, prompt)
    assert backend.prompt_cache.reused_tokens == reused  # the old weights' cache was not used
    backend.prompt_cache = PromptCache()
    (cold,) = greedy(backend, prompt)
    assert after.logprobs == pytest.approx(cold.logprobs, abs=1e-4)
    # The step did change the policy, so reusing the stale cache would have been wrong.
    assert after.logprobs != pytest.approx(before.logprobs, abs=1e-4)


def test_the_cache_keeps_to_its_token_budget_least_recently_used_first():
    cache = PromptCache(max_tokens=100)
    a, b = list(range(60)), list(range(100, 150))

    def kv(n: int):
        import torch
        from transformers.cache_utils import DynamicCache

        c = DynamicCache()
        c.update(torch.zeros(1, 1, n, 2), torch.zeros(1, 1, n, 2), 0)
        return c

    cache.store(a, kv(60), version=0)
    cache.store(b, kv(50), version=0)  # 110 tokens > 100: `a` goes
    assert cache.lookup(a + [1], version=0) == (0, None)
    n, copy = cache.lookup(b + [1], version=0)
    assert n == 50 and copy.get_seq_length() == 50
    # A partial match is cut back to the shared part; the stored entry keeps its length.
    n, copy = cache.lookup(b[:30] + [999], version=0)
    assert n == 30 and copy.get_seq_length() == 30
    assert cache.lookup(b + [1], version=0)[1].get_seq_length() == 50
    # Another weights version finds nothing.
    assert cache.lookup(b + [1], version=1) == (0, None)
