"""Run folders with real saved checkpoints, without training: a tiny LoRA adapter made from the
real embedded model (random nonzero B matrices, so base + adapter differs from the base) and
saved where a local run saves its weights, recorded in checkpoints.jsonl as the trainer does."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from mcp_rl.runconfig import RunConfig
from mcp_rl.rundir import CheckpointRecord
from mcp_rl.settings import Settings
from tests.kit.runs import ARITHMETIC_ENV, run_config


def write_run_file(
    settings: Settings,
    run_id: str,
    *,
    base_model: str,
    backend: str = "local",
    steps: int = 4,
    tokenizer_path: str | None = None,
    tinker_base_url: str | None = None,
    held_out_limit: int | None = None,
) -> RunConfig:
    return run_config(
        settings.runs_dir / run_id,
        run_id=run_id,
        environment=ARITHMETIC_ENV,
        env={"group_size": 4, "batch_size": 8, "total_steps": steps},
        openai=[{"model_name": base_model, "base_url": "http://127.0.0.1:1/v1", "api_key": "x"}],
        backend=backend,
        base_model=base_model,
        tokenizer_path=tokenizer_path,
        tinker_base_url=tinker_base_url,
        held_out_limit=held_out_limit,
        num_steps=steps,
        batch_size=8,
        group_size=4,
        dump=True,
    )


def record_checkpoint(config: RunConfig, step: int, kind: str, path: str, final: bool = False) -> None:
    record = CheckpointRecord(step=step, kind=kind, path=path, time=time.time(), final=final)  # type: ignore[arg-type]
    with open(config.paths.checkpoints_index, "a", encoding="utf-8") as fh:
        fh.write(record.model_dump_json() + "\n")


def make_adapter(model_dir: Path, target: Path, seed: int = 0, scale: float = 0.02) -> Any:
    """Save a rank-2 LoRA adapter of the real model at `target`; returns the PEFT model (unmerged)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    base = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    model = get_peft_model(
        base,
        LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj", "v_proj"], lora_dropout=0.0, task_type="CAUSAL_LM"),
    )
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(0.0, scale)
    model.eval()
    target.parent.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(target))
    return model


def write_local_checkpoint_run(
    settings: Settings,
    run_id: str,
    model_dir: Path,
    steps: tuple[int, ...] = (2,),
    held_out_limit: int | None = None,
) -> tuple[RunConfig, Any]:
    """A local run with an adapter saved at each of `steps` (the last marked final); returns the
    run file and the PEFT model of the last step."""
    config = write_run_file(
        settings, run_id, base_model=str(model_dir), steps=max(steps), held_out_limit=held_out_limit
    )
    model = None
    for i, step in enumerate(steps):
        folder = config.paths.checkpoints_dir / f"step_{step:06d}"
        model = make_adapter(model_dir, folder / "adapter", seed=step)
        final = i == len(steps) - 1
        record_checkpoint(config, step, "state", str(folder), final=final)
        record_checkpoint(config, step, "sampler", str(folder / "adapter"), final=final)
    return config, model


def json_line(text: str) -> dict[str, Any]:
    """The last JSON object line of a command's output."""
    for line in reversed(text.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise AssertionError(f"no JSON line in {text!r}")
