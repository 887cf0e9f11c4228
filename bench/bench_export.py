"""Merged export of the default model: seconds and peak memory.

Makes a small LoRA adapter (rank 8 on every projection, non-zero) on the embedded default model,
then runs the export worker's merge (base in fp32 + adapter -> merge_and_unload -> safetensors,
tokenizer, generation config, model card) in a child process, and prints the wall time and the
child's peak RSS. Also checks the merged folder's logits against base + adapter (max |diff|).

    flock /tmp/mcp-rl-heavy.lock .venv/bin/python bench/bench_export.py
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CHILD = """
import json, sys, time
from pathlib import Path
from mcp_rl.weights.export import ExportSpec, export
spec = ExportSpec.model_validate_json(Path(sys.argv[1]).read_text())
t = time.monotonic()
result, notes = export(spec, Path(spec.weights), lambda m: None)
print(json.dumps({"seconds": time.monotonic() - t, "size_bytes": result.size_bytes}))
"""


def main() -> int:
    import torch
    from peft import LoraConfig, PeftModel, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from mcp_rl.models import ensure_default_model
    from mcp_rl.settings import Settings
    from mcp_rl.weights.export import ExportSpec

    model_dir = Path(ensure_default_model(Settings.from_env()))
    work = Path(tempfile.mkdtemp(prefix="bench-export-"))
    torch.manual_seed(0)
    base = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    peft = get_peft_model(base, LoraConfig(r=8, lora_alpha=16, target_modules="all-linear", init_lora_weights=False))
    with torch.no_grad():
        for name, p in peft.named_parameters():
            if "lora_" in name:
                p.mul_(0.05)
    peft.save_pretrained(str(work / "adapter"))
    del peft, base
    spec = ExportSpec(
        run_id="bench",
        run_dir=work,
        step=1,
        weights=str(work / "adapter"),
        format="merged",
        dest=work / "merged",
        base_model=str(model_dir),
        environment="bench",
    )
    (work / "spec.json").write_text(spec.model_dump_json())
    began = time.monotonic()
    out = subprocess.run([sys.executable, "-c", CHILD, str(work / "spec.json")], capture_output=True, text=True)
    wall = time.monotonic() - began
    if out.returncode != 0:
        print(out.stderr[-3000:], file=sys.stderr)
        return 1
    inner = json.loads(out.stdout.strip().splitlines()[-1])
    peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    tok = AutoTokenizer.from_pretrained(str(work / "merged"))
    ids = tok("What is 17 + 25?", return_tensors="pt")
    with torch.no_grad():
        ref = PeftModel.from_pretrained(
            AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32), str(work / "adapter")
        )(**ids).logits
        got = AutoModelForCausalLM.from_pretrained(str(work / "merged"))(**ids).logits
    print(
        f"merged export of {model_dir.name}: {inner['seconds']:.1f} s export ({wall:.1f} s with interpreter start), "
        f"peak RSS {peak_mb:.0f} MB, {inner['size_bytes'] / 1e6:.0f} MB written, "
        f"max |logit diff| vs base+adapter {float((ref - got).abs().max()):.2e}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
