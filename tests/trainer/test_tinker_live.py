"""Opt-in tests against the REAL paid services (`pytest -m live`; skipped without their keys):
one Tinker training step on the smallest model, and a W&B log-then-lookup of a fresh group.

They need network access (Tinker, the Hugging Face hub for the tokenizer, W&B) and spend a little
money; nothing here runs in the default tiers.
"""

from __future__ import annotations

import asyncio
import os
import re
import time
import uuid
from pathlib import Path

import pytest

from mcp_rl.trainer.backends.base import AdamParams, SamplingRequest, TrainingExample

pytestmark = pytest.mark.live

TTL_S = 3600  # Tinker's shortest checkpoint lifetime


def _smallest(models: list[str]) -> str:
    def size(name: str) -> float:
        match = re.search(r"(\d+(?:\.\d+)?)B\b", name)
        return float(match.group(1)) if match else float("inf")

    return min(models, key=size)


@pytest.mark.skipif(not os.environ.get("TINKER_API_KEY"), reason="TINKER_API_KEY not set")
def test_one_real_tinker_step_with_expiring_checkpoints_and_a_finished_session(monkeypatch: pytest.MonkeyPatch) -> None:
    import tinker
    from huggingface_hub import constants

    from mcp_rl.trainer.backends.tinker import TinkerBackend

    # The test tier runs offline; the product fetches the tokenizer from the hub, so this test does.
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    key = os.environ["TINKER_API_KEY"]
    rest = tinker.RestClient(api_key=key)
    models = [m.model_name for m in rest.get_server_capabilities().result(timeout=60).supported_models if m.model_name]
    model = _smallest(models)
    backend = TinkerBackend(
        tinker.ServiceClient(api_key=key), base_model=model, lora_rank=8, checkpoint_ttl_s=TTL_S, create_timeout_s=900
    )
    try:
        backend.prepare()
        prompt = backend.tokenizer.encode("Count: 1, 2, 3,", add_special_tokens=False)
        seqs = backend.sample(SamplingRequest(prompt_tokens=prompt, n=2, max_tokens=8, temperature=1.0))
        assert len(seqs) == 2 and all(len(s.tokens) == len(s.logprobs) > 0 for s in seqs)
        examples = []
        for seq, advantage in zip(seqs, (1.0, -1.0), strict=True):
            full = prompt + seq.tokens
            trained = [t >= len(prompt) - 1 for t in range(len(full) - 1)]
            examples.append(
                TrainingExample(
                    input_tokens=full[:-1],
                    target_tokens=full[1:],
                    trained=trained,
                    advantages=[advantage if k else 0.0 for k in trained],
                    sampling_logprobs=[0.0] * (len(prompt) - 1) + seq.logprobs,
                )
            )
        result, _ = backend.train_step(examples, AdamParams(learning_rate=1e-5), 1)
        assert all(len(lp) == len(e.target_tokens) for lp, e in zip(result.training_logprobs, examples, strict=True))
        state, weights = backend.save_checkpoint("step_000001", final=False)
        assert state.startswith("tinker://") and weights.startswith("tinker://")
        run_id = backend.training.model_id
        listed = {c.tinker_path: c for c in rest.list_checkpoints(run_id).result(timeout=60).checkpoints}
        assert listed[state].expires_at is not None and listed[weights].expires_at is not None
    finally:
        backend.close("success", "mcp-rl live test")


@pytest.mark.skipif(not os.environ.get("WANDB_API_KEY"), reason="WANDB_API_KEY not set")
@pytest.mark.anyio
async def test_wandb_log_then_lookup_of_a_fresh_group(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import wandb

    from mcp_rl.metrics.wandb_reader import WandbQuery, lookup

    wandb.teardown()
    monkeypatch.setenv("WANDB_MODE", "online")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")
    project, group = "mcp-rl-live-tests", f"live-{uuid.uuid4().hex[:8]}"
    entity = os.environ.get("WANDB_ENTITY") or None
    run = wandb.init(
        project=project,
        entity=entity,
        group=group,
        name=f"{group}-trainer",
        job_type="trainer",
        reinit="finish_previous",
    )
    for step in range(1, 4):
        run.log({"reward/mean": step / 4, "train/loss": 1.0 / step}, step=step)
    run.finish()
    query = WandbQuery(
        mode="online", project=project, entity=entity, group=group, api_key=os.environ["WANDB_API_KEY"], timeout_s=30
    )
    deadline = time.monotonic() + 120
    while True:  # W&B indexes a finished run within seconds to a minute
        report = await lookup(query)
        if "reward/mean" in report.metrics or time.monotonic() > deadline:
            break
        await asyncio.sleep(5)
    assert report.url and group in (report.runs[0].name or "")
    assert report.metrics["reward/mean"].final == pytest.approx(0.75)
    assert report.metrics["reward/mean"].final_step == 3
