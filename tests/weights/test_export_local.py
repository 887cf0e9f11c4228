"""Export of a local run's weights on the embedded model: the adapter folder loads with
PeftModel.from_pretrained, the merged folder loads with AutoModelForCausalLM alone and gives
base + adapter's logits within 1e-4; an existing destination is refused; a failed write (a full
disk, injected at the write layer) leaves nothing behind."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from mcp_rl.errors import UserError
from mcp_rl.weights.destination import MARKER_FILE, write_marker
from mcp_rl.weights.export import ExportSpec, export

pytestmark = pytest.mark.slow
PROMPTS = ["What is 17 + 25?", "Name a prime number.", "The capital of France is"]


@pytest.fixture(scope="module")
def adapter(default_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny LoRA adapter with non-zero weights (B is zero at a fresh init: no change to test)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    base = AutoModelForCausalLM.from_pretrained(str(default_model), dtype=torch.float32)
    config = LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    model = get_peft_model(base, config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_" in name:
                p.mul_(0.05)
    folder = tmp_path_factory.mktemp("adapter")
    model.save_pretrained(str(folder))
    return folder


def _spec(model: Path, adapter: Path, dest: Path, fmt: str, **kw) -> ExportSpec:
    run_dir = dest.parent / "run"
    run_dir.mkdir(exist_ok=True)
    (run_dir / "metrics.jsonl").write_text(
        '{"step": 0, "eval/percent_correct": 0.25}\n{"step": 5, "eval/percent_correct": 0.5}\n'
    )
    return ExportSpec(
        run_id="r1",
        run_dir=run_dir,
        step=5,
        weights=str(adapter),
        format=fmt,
        dest=dest,
        base_model=str(model),
        environment="arithmetic",
        num_steps=5,
        trainer_config={"lora_rank": 2},
        **kw,
    )


def _logits(model, tokenizer) -> list:
    import torch

    out = []
    with torch.no_grad():
        for prompt in PROMPTS:
            ids = tokenizer(prompt, return_tensors="pt")
            out.append(model(**ids).logits[0])
    return out


def test_adapter_and_merged_exports_load_and_agree(default_model: Path, adapter: Path, tmp_path: Path) -> None:
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    result, _ = export(_spec(default_model, adapter, tmp_path / "adapter", "adapter"), adapter, lambda m: None)
    names = set(result.files)
    assert {"adapter_config.json", "adapter_model.safetensors", "README.md", "tokenizer_config.json"} <= names
    card = (tmp_path / "adapter" / "README.md").read_text()
    assert "arithmetic" in card and "eval/percent_correct" in card and "0.25" in card and "0.5" in card

    merged_result, _ = export(_spec(default_model, adapter, tmp_path / "merged", "merged"), adapter, lambda m: None)
    assert "model.safetensors" in merged_result.files and "config.json" in merged_result.files
    assert "generation_config.json" in merged_result.files
    assert not list(tmp_path.glob(".*.tmp-*"))

    tokenizer = AutoTokenizer.from_pretrained(str(tmp_path / "merged"))
    base = AutoModelForCausalLM.from_pretrained(str(default_model), dtype=torch.float32)
    reference = _logits(PeftModel.from_pretrained(base, str(tmp_path / "adapter")), tokenizer)
    plain = _logits(AutoModelForCausalLM.from_pretrained(str(default_model), dtype=torch.float32), tokenizer)
    merged = _logits(AutoModelForCausalLM.from_pretrained(str(tmp_path / "merged")), tokenizer)
    for ref, got, raw in zip(reference, merged, plain, strict=True):
        assert float((ref - got).abs().max()) < 1e-4
        assert float((ref - raw).abs().max()) > 1e-3  # the adapter changes the logits: the check can fail


def test_existing_dest_is_refused_and_a_full_disk_leaves_nothing(
    default_model: Path, adapter: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import shutil

    dest = tmp_path / "out"
    dest.mkdir()
    (dest / "mine.txt").write_text("the user's file")
    with pytest.raises(UserError, match="overwrite"):
        export(_spec(default_model, adapter, dest, "adapter"), adapter, lambda m: None)
    assert [p.name for p in dest.iterdir()] == ["mine.txt"]

    real = shutil.copyfile
    calls = []

    def full_disk(src, dst, *a, **k):
        calls.append(dst)
        if len(calls) == 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(src, dst, *a, **k)

    with pytest.raises(UserError, match="not written by an mcp-rl export"):
        export(_spec(default_model, adapter, dest, "adapter", overwrite=True), adapter, lambda m: None)
    write_marker(dest, run_id="run", step=1, format="adapter")  # an earlier export: overwrite may replace it
    monkeypatch.setattr(shutil, "copyfile", full_disk)
    with pytest.raises(OSError, match="No space"):
        export(_spec(default_model, adapter, dest, "adapter", overwrite=True), adapter, lambda m: None)
    assert sorted(p.name for p in dest.iterdir()) == [MARKER_FILE, "mine.txt"]  # the old folder stands
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "run"]  # no partial folder left
