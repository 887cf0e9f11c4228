"""The batched greedy path of held-out evaluation gives the tokens that decoding each prompt on
its own gives (a tiny random Llama: shared prefixes, prompts of different lengths, stop tokens)."""

from __future__ import annotations

import pytest

from mcp_rl.trainer.local_greedy import greedy_completions, shared_prefix_length

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


def _one_by_one(model, prompt: list[int], max_tokens: int, stops: set[int]) -> list[int]:
    ids = list(prompt)
    out: list[int] = []
    for _ in range(max_tokens):
        token = int(model(input_ids=torch.tensor([ids])).logits[0, -1].argmax())
        out.append(token)
        if token in stops:
            break
        ids.append(token)
    return out


def test_shared_prefix_leaves_every_prompt_a_token() -> None:
    assert shared_prefix_length([[1, 2, 3], [1, 2, 4, 5]]) == 2
    assert shared_prefix_length([[1, 2], [1, 2, 3]]) == 1
    assert shared_prefix_length([[5, 1], [6, 1]]) == 0


@pytest.mark.parametrize("prefix", [[], [7, 3, 9, 11, 2, 5, 8, 13]])
def test_batched_greedy_equals_decoding_each_prompt(prefix: list[int]) -> None:
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
    )
    model = transformers.LlamaForCausalLM(config).eval()
    prompts = [prefix + tail for tail in ([1, 2, 3], [4], [5, 6, 7, 8, 9, 10], [11, 12], [13, 14, 15])]
    expected_free = [_one_by_one(model, p, 6, set()) for p in prompts]
    # A stop token that one row produces early ends that row only.
    stop = expected_free[0][1]
    with torch.no_grad():
        free = greedy_completions(model, prompts, 6, [], "cpu")
        stopped = greedy_completions(model, prompts, 6, [stop], "cpu")
        expected_stopped = [_one_by_one(model, p, 6, {stop}) for p in prompts]
    assert free == expected_free
    assert stopped == expected_stopped
    assert len(stopped[0]) == 2 and stopped[0][-1] == stop
