"""Folding a LoRA adapter into its base weights for an evaluation computes what the adapter
computes and leaves the model being trained exactly as it was (a tiny random Llama with peft)."""

from __future__ import annotations

import pytest

from mcp_rl.trainer.backends.lora_fold import lora_folded

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft")


def _lora_model():
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )
    base = transformers.LlamaForCausalLM(config).eval()
    lora = peft.LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules=["q_proj", "v_proj", "down_proj"])
    model = peft.get_peft_model(base, lora)
    with torch.no_grad():  # a trained adapter: B is no longer zero
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.5)
    return model


def _state(model) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def test_folded_model_computes_base_plus_adapter_and_is_put_back_exactly() -> None:
    model = _lora_model()
    ids = torch.tensor([[1, 5, 9, 3, 7], [2, 4, 6, 8, 10]])
    before = _state(model)
    weights_before = {n: id(p) for n, p in model.named_parameters()}
    with torch.no_grad():
        expected = model(input_ids=ids).logits
        with lora_folded(model) as folded:
            inside = model(input_ids=ids).logits
        after = model(input_ids=ids).logits
    assert folded is True
    # Without the adapter the logits differ: the fold is not a no-op by accident.
    with torch.no_grad(), model.disable_adapter():
        plain = model(input_ids=ids).logits
    assert (plain - expected).abs().max() > 1e-2
    assert torch.allclose(inside, expected, atol=1e-5)
    assert torch.equal(after, expected)
    after_state = _state(model)
    assert after_state.keys() == before.keys()
    assert all(torch.equal(after_state[k], before[k]) for k in before)
    # The very Parameter objects the optimizer holds are back, trainable as before.
    assert {n: id(p) for n, p in model.named_parameters()} == weights_before
    assert all(p.requires_grad == ("lora_" in n) for n, p in model.named_parameters())


def test_weights_are_put_back_when_the_evaluation_fails() -> None:
    model = _lora_model()
    before = _state(model)
    with pytest.raises(RuntimeError, match="boom"), lora_folded(model):
        raise RuntimeError("boom")
    after = _state(model)
    assert all(torch.equal(after[k], before[k]) for k in before)
    layers = [m for m in model.modules() if isinstance(m, peft.tuners.lora.LoraLayer)]
    assert layers and not any(layer.disable_adapters for layer in layers)


def test_a_model_without_adapter_is_left_alone() -> None:
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=16, hidden_size=8, intermediate_size=16, num_hidden_layers=1, num_attention_heads=2
    )
    model = transformers.LlamaForCausalLM(config)
    with lora_folded(model) as folded:
        assert folded is False


def test_an_untrained_adapter_gives_exactly_the_base() -> None:
    model = _lora_model()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.zero_()
    ids = torch.tensor([[3, 1, 4, 1, 5]])
    with torch.no_grad():
        with model.disable_adapter():
            base = model(input_ids=ids).logits
        with lora_folded(model) as folded:
            inside = model(input_ids=ids).logits
    assert folded is True
    assert torch.equal(inside, base)


@pytest.mark.parametrize("eval_threads", [None, 1])
def test_the_evaluation_runs_on_every_usable_core_then_gives_them_back(
    tiny_model, eval_threads, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mcp_rl.trainer import local_greedy
    from mcp_rl.trainer.backends.local import LocalBackend
    from mcp_rl.trainer.cpus import usable_cpus

    backend = LocalBackend(tiny_model, lora_rank=2, eval_threads=eval_threads)
    seen: list[int] = []

    def greedy(*args, **kwargs):
        seen.append(torch.get_num_threads())
        return [[1]]

    monkeypatch.setattr(local_greedy, "greedy_completions", greedy)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)  # what a run's trainer uses on 2 cores
        assert backend.sample_greedy([[5, 6, 7]], 4) == [[1]]
        assert seen == [eval_threads or max(1, usable_cpus())]
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
