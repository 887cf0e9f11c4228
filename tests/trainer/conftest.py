"""Fixtures of the trainer tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fakes.tinker_server import write_tiny_tokenizer


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A saved 2-layer random Llama with a tiny tokenizer: a LocalBackend without the real model."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    folder = Path(write_tiny_tokenizer(tmp_path_factory.mktemp("tiny-llama")))
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=256,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        pad_token_id=0,
        eos_token_id=1,
    )
    LlamaForCausalLM(config).save_pretrained(folder)
    return folder
