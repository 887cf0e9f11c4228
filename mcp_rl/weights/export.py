"""Exporting a run's weights: a PEFT adapter folder or a merged Hugging Face model.

Runs in the export worker process (torch, transformers and peft are imported here). Everything
is written into a temporary folder beside the destination and renamed into place at the end:
a failed export (a full disk, a bad checkpoint) leaves no partial output, and an existing
destination is replaced only when the caller asked to overwrite, after the new one is complete.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel

from mcp_rl.atomic import replace_dir, temp_sibling
from mcp_rl.errors import UserError
from mcp_rl.models import hub_id_of
from mcp_rl.rundir import METRICS_FILE, read_jsonl
from mcp_rl.weights.destination import MARKER_FILE, check_existing, write_marker

Format = Literal["adapter", "merged"]
ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors")
Progress = Callable[[str], None]


class ExportSpec(BaseModel):
    run_id: str
    run_dir: Path
    step: int
    weights: str  # a local adapter folder or a tinker:// training checkpoint
    format: Format
    dest: Path
    overwrite: bool = False
    base_model: str
    environment: str
    num_steps: int | None = None
    trainer_config: dict[str, Any] = {}
    push_to_hub: str | None = None
    # The export already at `dest` (same run, step and format, written by mcp-rl) is only pushed.
    push_only: bool = False


class ExportResult(BaseModel):
    dest: str
    format: Format
    files: list[str]
    size_bytes: int
    seconds: float
    hub_url: str | None = None


def eval_figures(run_dir: Path) -> dict[str, tuple[float, float, int, int]]:
    """Each `eval/...` metric's first and last value with their steps."""
    out: dict[str, tuple[float, float, int, int]] = {}
    for row in read_jsonl(run_dir / METRICS_FILE).rows:
        for key, value in row.items():
            if key.startswith("eval/") and isinstance(value, int | float) and not isinstance(value, bool):
                step = int(row.get("step", 0))
                first = out.get(key)
                out[key] = (
                    (first[0], float(value), first[2], step) if first else (float(value), float(value), step, step)
                )
    return out


def model_card(spec: ExportSpec) -> str:
    lines = ["---", "library_name: peft" if spec.format == "adapter" else "library_name: transformers"]
    hub_id = hub_id_of(spec.base_model)
    if hub_id:
        lines.append(f"base_model: {hub_id}")
    lines += ["tags:", "- mcp-rl", "- reinforcement-learning", "- lora", "---", ""]
    lines.append(f"# {spec.run_id}: {spec.environment} (step {spec.step})")
    lines.append("")
    kind = "a LoRA adapter (PEFT)" if spec.format == "adapter" else "the base model with the LoRA adapter merged in"
    lines.append(
        f"Trained with mcp-rl (RL post-training, GRPO-style) on the `{spec.environment}` environment: {kind}. "
        f"Base model: `{hub_id or spec.base_model}`. Weights of step {spec.step}"
        + (f" of {spec.num_steps}." if spec.num_steps else ".")
    )
    figures = eval_figures(spec.run_dir)
    if figures:
        lines += [
            "",
            "## Evaluation (held-out items, from the run's metrics)",
            "",
            "| metric | first | last |",
            "|---|---|---|",
        ]
        for key, (first, last, s0, s1) in sorted(figures.items()):
            lines.append(f"| {key} | {first:.4g} (step {s0}) | {last:.4g} (step {s1}) |")
    if spec.trainer_config:
        lines += [
            "",
            "## Training configuration",
            "",
            "```json",
            # The base model as its Hub id here too: a local path means nothing to a reader.
            json.dumps(
                {
                    **spec.trainer_config,
                    **({"base_model": hub_id} if hub_id and "base_model" in spec.trainer_config else {}),
                },
                indent=1,
                default=str,
            ),
            "```",
        ]
    return "\n".join(lines) + "\n"


def _copy_adapter(source: Path, target: Path, base_model: str) -> None:
    """The adapter files only (no links), with base_model_name_or_path naming the base model's Hub
    id when one is known (a local path means nothing on another machine), else filled in when missing."""
    for name in ADAPTER_FILES:
        src = source / name
        if src.is_symlink() or not src.is_file():
            raise UserError(f"the checkpoint {source} has no regular {name}: it cannot be exported")
        shutil.copyfile(src, target / name)
    config_path = target / "adapter_config.json"
    config = json.loads(config_path.read_text(encoding="utf-8"))
    hub_id = hub_id_of(base_model) or hub_id_of(str(config.get("base_model_name_or_path") or ""))
    wanted = hub_id or config.get("base_model_name_or_path") or base_model
    if config.get("base_model_name_or_path") != wanted:
        config["base_model_name_or_path"] = wanted
        config_path.write_text(json.dumps(config, indent=2), encoding="utf-8")


def _save_tokenizer(base_model: str, target: Path, notes: list[str]) -> None:
    # transformers: only the export worker loads it
    from transformers import AutoTokenizer

    try:
        AutoTokenizer.from_pretrained(base_model).save_pretrained(str(target))
    except OSError as exc:
        notes.append(f"tokenizer of {base_model} not included ({type(exc).__name__}); load it from the base model")


def existing_result(spec: ExportSpec) -> ExportResult:
    """The export already at `spec.dest`, described as a fresh one would be (nothing written)."""
    files = sorted(str(p.relative_to(spec.dest)) for p in spec.dest.rglob("*") if p.is_file() and p.name != MARKER_FILE)
    size = sum((spec.dest / f).stat().st_size for f in files)
    return ExportResult(dest=str(spec.dest), format=spec.format, files=files, size_bytes=size, seconds=0.0)


def export(spec: ExportSpec, adapter_dir: Path, progress: Progress) -> tuple[ExportResult, list[str]]:
    """Write the export of the adapter in `adapter_dir` to `spec.dest` (complete, or nothing)."""
    started = time.monotonic()
    check_existing(spec.dest, spec.overwrite)  # again: the server checked before starting us
    spec.dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_sibling(spec.dest)
    tmp.mkdir()
    notes: list[str] = []
    try:
        if spec.format == "adapter":
            progress("copying the adapter")
            _copy_adapter(adapter_dir, tmp, spec.base_model)
        else:
            _merge(spec, adapter_dir, tmp, progress)
        progress("writing the tokenizer and the model card")
        _save_tokenizer(spec.base_model, tmp, notes)
        (tmp / "README.md").write_text(model_card(spec), encoding="utf-8")
        write_marker(tmp, run_id=spec.run_id, step=spec.step, format=spec.format, weights=spec.weights)
        replace_dir(tmp, spec.dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    files = sorted(str(p.relative_to(spec.dest)) for p in spec.dest.rglob("*") if p.is_file() and p.name != MARKER_FILE)
    size = sum((spec.dest / f).stat().st_size for f in files)
    result = ExportResult(
        dest=str(spec.dest),
        format=spec.format,
        files=files,
        size_bytes=size,
        seconds=round(time.monotonic() - started, 2),
    )
    return result, notes


def _merge(spec: ExportSpec, adapter_dir: Path, target: Path, progress: Progress) -> None:
    """Base + adapter merged in float32 (no rounding of the sum), saved as safetensors."""
    # torch, transformers, peft: only the export worker loads them
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    progress(f"loading the base model {spec.base_model}")
    base = AutoModelForCausalLM.from_pretrained(spec.base_model, dtype=torch.float32)
    progress("merging the adapter")
    merged = PeftModel.from_pretrained(base, str(adapter_dir)).merge_and_unload()
    progress("writing the merged model (safetensors)")
    merged.save_pretrained(str(target), safe_serialization=True)
    if getattr(merged, "generation_config", None) is not None and not (target / "generation_config.json").exists():
        merged.generation_config.save_pretrained(str(target))
