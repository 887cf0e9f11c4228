"""Exports name the base model by the Hub id it came from, never a local path (issue 34)."""

from __future__ import annotations

import json
from pathlib import Path

from mcp_rl.models import DEFAULT_MODEL_HUB_ID, hub_id_of
from mcp_rl.weights.export import ADAPTER_FILES, ExportSpec, _copy_adapter, model_card


def test_the_hub_id_of_a_base_model(tmp_path: Path) -> None:
    assert DEFAULT_MODEL_HUB_ID == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert hub_id_of("default") == DEFAULT_MODEL_HUB_ID
    assert hub_id_of(str(Path.home() / ".mcp-rl/models/SmolLM2-135M-Instruct")) == DEFAULT_MODEL_HUB_ID
    assert hub_id_of("Qwen/Qwen3-8B") == "Qwen/Qwen3-8B"
    named = tmp_path / "mine"
    named.mkdir()
    (named / "config.json").write_text(json.dumps({"_name_or_path": "org/base"}))
    assert hub_id_of(str(named)) == "org/base"
    (named / "config.json").write_text(json.dumps({"_name_or_path": str(tmp_path)}))
    assert hub_id_of(str(named)) is None


def test_the_card_and_adapter_config_name_the_default_models_hub_id(tmp_path: Path) -> None:
    local = str(tmp_path / "home/.mcp-rl/models/SmolLM2-135M-Instruct")
    source, target = tmp_path / "ckpt", tmp_path / "out"
    source.mkdir()
    target.mkdir()
    for name in ADAPTER_FILES:
        (source / name).write_text("{}" if name.endswith(".json") else "x")
    (source / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": local, "r": 8}))
    _copy_adapter(source, target, local)
    config = json.loads((target / "adapter_config.json").read_text())
    assert config == {"base_model_name_or_path": DEFAULT_MODEL_HUB_ID, "r": 8}
    spec = ExportSpec(
        run_id="r1",
        run_dir=tmp_path,
        step=2,
        weights=str(source),
        format="adapter",
        dest=target,
        base_model=local,
        environment="arithmetic",
        trainer_config={"base_model": local, "lora_rank": 8},
    )
    card = model_card(spec)
    assert f"base_model: {DEFAULT_MODEL_HUB_ID}" in card and f"Base model: `{DEFAULT_MODEL_HUB_ID}`" in card
    assert local not in card
