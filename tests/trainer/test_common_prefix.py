"""Training runs the prefix shared by every group of a batch once, and the gradient is the same
as running each group's whole prompt (a tiny random Llama model, so no real model is needed)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from mcp_rl.trainer.backends.base import TrainingExample
from mcp_rl.trainer.backends.common_prefix import MIN_COMMON_TOKENS, common_length


def test_common_length_leaves_each_prefix_a_token_and_ignores_short_overlaps() -> None:
    shared = list(range(3, 3 + MIN_COMMON_TOKENS + 4))
    assert common_length([tuple(shared + [100]), tuple(shared + [101, 102])]) == len(shared)
    assert common_length([tuple(shared), tuple(shared + [101])]) == len(shared) - 1
    assert common_length([tuple(shared[:5] + [7] * 30), tuple(shared[:5] + [8] * 30)]) == 0
    assert common_length([tuple(shared + [100])]) == 0


def _examples(seed: int) -> list[TrainingExample]:
    rng = random.Random(seed)
    instructions = [rng.randrange(3, 256) for _ in range(MIN_COMMON_TOKENS + 10)]
    out = []
    for _ in range(3):  # groups: the same instructions, their own question
        prompt = instructions + [rng.randrange(3, 256) for _ in range(rng.randint(2, 5))]
        for _ in range(3):  # answers of different lengths
            answer = [rng.randrange(3, 256) for _ in range(rng.randint(1, 4))]
            tokens = prompt + answer
            out.append(
                TrainingExample(
                    input_tokens=tokens[:-1],
                    target_tokens=tokens[1:],
                    trained=[False] * (len(prompt) - 1) + [True] * len(answer),
                    advantages=[0.0] * (len(prompt) - 1) + [rng.uniform(-1, 1)] * len(answer),
                    sampling_logprobs=[0.0] * (len(prompt) - 1) + [rng.uniform(-6, -1) for _ in answer],
                )
            )
    return out


def _gradient(model_dir: Path, examples: list[TrainingExample], monkeypatch: pytest.MonkeyPatch, shared: bool):
    import torch

    from mcp_rl.trainer.backends import local
    from mcp_rl.trainer.backends.local import LocalBackend

    if not shared:  # the way before: every group runs its whole prompt
        monkeypatch.setattr(local, "common_length", lambda prefixes: 0)
    backend = LocalBackend(model_dir, lora_rank=4, seed=1)
    # LoRA's B starts at zero; make the adapter matter so its gradient flows through A as well.
    generator = torch.Generator().manual_seed(3)
    for param in backend._params():
        param.data.normal_(0, 0.05, generator=generator)
    result = backend.forward_backward(examples)
    grads = {n: p.grad.clone() for n, p in backend.model.named_parameters() if p.requires_grad}
    monkeypatch.undo()
    return result, grads


def test_the_shared_prefix_gives_the_same_loss_logprobs_and_gradient(
    tiny_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch

    examples = _examples(7)
    prefixes = {tuple(e.input_tokens[: e.trained.index(True)]) for e in examples}
    assert len(prefixes) == 3 and common_length(list(prefixes)) >= MIN_COMMON_TOKENS  # the path under test runs
    once, grads_once = _gradient(tiny_model, examples, monkeypatch, shared=True)
    each, grads_each = _gradient(tiny_model, examples, monkeypatch, shared=False)
    assert once.loss == pytest.approx(each.loss, rel=1e-4, abs=1e-5)
    for a, b in zip(once.training_logprobs, each.training_logprobs, strict=True):
        assert a == pytest.approx(b, abs=1e-4)
    assert grads_once.keys() == grads_each.keys() and len(grads_once) > 0
    lora_a = [n for n in grads_once if "lora_A" in n]
    assert lora_a and any(float(grads_each[n].abs().max()) > 0 for n in lora_a)  # the check below is not vacuous
    for name in grads_once:
        torch.testing.assert_close(grads_once[name], grads_each[name], rtol=1e-3, atol=1e-5, msg=name)
