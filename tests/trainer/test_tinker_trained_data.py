"""Issue 27 at the wire: the loopback Tinker receives exactly what the environment asked to train
(overrides honoured) and nothing that cannot move the weights (all-zero advantages)."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from tests.kit.tinker_wire import make_backend, scored_group, serve, tinker_run_config, trainer_on_the_wire
from tests.kit.wait import wait_for_async

OVERRIDDEN_TOKEN = 77


def _overridden_group(scores: list[float]) -> dict:
    group = scored_group(scores)
    # Sequence 0 is "truncated": the environment asks for its advantage to be zero.
    group["tokens"][0][-2] = OVERRIDDEN_TOKEN
    group["masks"][0][-2] = OVERRIDDEN_TOKEN
    group["overrides"] = [{"set_advantage_to_zero": True}, {}]
    return group


@pytest.mark.anyio
async def test_tinker_gets_no_zero_advantage_datum_and_no_overridden_sequence(
    tmp_path: Path, tiny_tokenizer: str
) -> None:
    config = tinker_run_config(tmp_path, tiny_tokenizer, num_steps=2, batch_size=4, group_size=2, run_id="overrides")
    async with trainer_on_the_wire(config, tmp_path, tiny_tokenizer) as run:
        groups = [scored_group([1.0, 1.0]), _overridden_group([0.0, 1.0]), _overridden_group([1.0, 0.0])]
        await run.post(*groups, scored_group([0.0, 0.0]))
        assert await run.finish() == 0
    datums = [d for record in run.wire.forward_backward for d in record["datums"]]
    assert datums, "nothing was trained"
    for d in datums:
        assert any(float(a) != 0.0 for a in d["advantages"]), "a datum whose advantages are all zero was billed"
        if OVERRIDDEN_TOKEN in [int(t) for t in d["target_tokens"]]:
            assert not any(float(a) != 0.0 for a in d["advantages"]), "an overridden sequence was trained"
    # Step 1: an all-equal group and an overridden one -> 1 datum; step 2: the same -> 1 datum,
    # while the all-equal group [0, 0] of step 2 is skipped entirely.
    assert len(datums) == 2
    # Training lines only (held-out evaluations add lines of their own).
    lines = [m for m in map(json.loads, config.paths.metrics.read_text().splitlines()) if "batch/sequences" in m]
    assert [m["batch/zeroed_sequences"] for m in lines] == [1, 1]
    assert [m["batch/skipped_zero_advantage"] for m in lines] == [3, 3]
    assert [m["batch/trained_sequences"] for m in lines] == [1, 1]
    assert [m["batch/sequences"] for m in lines] == [4, 4]


async def _sampled_group(http: httpx.AsyncClient, inference_url: str, prompt: list[int]) -> dict:
    """A group of two completions sampled now by the trainer's own inference server (as an
    environment's rollout would be), scored 1 and 0."""
    tokens, masks, lps = [], [], []
    for seed in (1, 2):
        body = {"input_ids": prompt, "sampling_params": {"max_new_tokens": 3, "seed": seed}, "return_logprob": True}
        out = (await http.post(f"{inference_url}/generate", json=body, timeout=30)).json()
        ids = out["output_ids"]
        tokens.append(prompt + ids)
        masks.append([-100] * len(prompt) + ids)
        lps.append([1.0] * len(prompt) + [e[0] for e in out["meta_info"]["output_token_logprobs"]])
    return {"tokens": tokens, "masks": masks, "scores": [1.0, 0.0], "inference_logprobs": lps}


@pytest.mark.anyio
async def test_tinker_trains_nothing_more_than_one_step_behind_and_reports_the_lag(
    tmp_path: Path, tiny_tokenizer: str
) -> None:
    config = tinker_run_config(tmp_path, tiny_tokenizer, num_steps=3, batch_size=2, group_size=2, run_id="lag")

    async def step_reached(step: int) -> bool:
        status = config.paths.trainer_status
        return status.exists() and json.loads(status.read_text()).get("step", 0) >= step

    async with trainer_on_the_wire(config, tmp_path, tiny_tokenizer) as run:
        # Three groups sampled by the initial weights, trained at steps 1, 2 and 3.
        groups = [await _sampled_group(run.http, run.inference_url, [11, 12, 13, k]) for k in (20, 21, 22)]
        for step, group in enumerate(groups, start=1):
            await run.post(group)
            await wait_for_async(lambda: step_reached(step), 60, f"step {step}", task=run.task)
        assert await run.finish() == 0
    wire = run.wire
    # Training lines only (held-out evaluations add lines of their own).
    lines = [m for m in map(json.loads, config.paths.metrics.read_text().splitlines()) if "batch/sequences" in m]
    assert [m["policy_lag/max"] for m in lines] == [0, 1, 2]
    assert [m["policy_lag/stale_sequences"] for m in lines] == [0, 0, 2]
    assert [m["batch/trained_sequences"] for m in lines] == [2, 2, 0]
    # Two steps reached the wire; the group two steps old was not trained (nor billed).
    assert len(wire.forward_backward) == 2


def test_stop_strings_and_stop_ids_keep_eos_on_the_wire(tiny_tokenizer: str) -> None:
    from mcp_rl.trainer.backends.base import SamplingRequest

    with serve(tiny_tokenizer) as server:
        backend = make_backend(server)
        backend.prepare()
        backend.sample(SamplingRequest(prompt_tokens=[3, 4], stop=["}"]))
        backend.sample(SamplingRequest(prompt_tokens=[3, 4], stop_token_ids=[7]))
        backend.sample(SamplingRequest(prompt_tokens=[3, 4]))
        stops = [s["params"].get("stop") for s in server.wire.samples]
    # A given stop list replaces Tinker's implicit EOS stop: the tokenizer's EOS is added back.
    assert stops == [["}", "<eos>"], [7, 1], None]
