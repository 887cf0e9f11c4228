"""Costs on the wire: the REAL tinker SDK against the loopback Tinker (tests/fakes/tinker_server.py).
The tokens a run reports per step are the tokens the server received and generated, and a run
with a small max_cost_usd ends at the cap: stopped, its checkpoint kept, the cause in words."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mcp_rl.costs.rates import tinker_rates
from mcp_rl.rundir import (
    COST_PREFILL_TOKENS_KEY,
    COST_SAMPLED_TOKENS_KEY,
    COST_STEP_USD_KEY,
    COST_TOTAL_USD_KEY,
    COST_TRAINED_TOKENS_KEY,
    ROLLOUTS_FILE,
    read_rollouts,
)
from mcp_rl.trainer.backends.base import AdamParams, SamplingRequest
from tests.kit.tinker_wire import example, make_backend, scored_group, serve, tinker_run_config, trainer_on_the_wire


def test_the_meter_counts_what_the_server_received_and_generated(tiny_tokenizer: str) -> None:
    with serve(tiny_tokenizer) as server:
        backend = make_backend(server)
        backend.prepare()
        backend.meter.take()
        for prompt, n in (([1, 2, 3], 3), ([4, 5, 6, 7, 8], 2)):
            backend.sample(SamplingRequest(prompt_tokens=prompt, n=n, max_tokens=5, temperature=1.0))
        batch = [example([5, 6, 7, 8], 1.0, [-0.5] * 4), example([5, 6, 9], -1.0, [-0.4] * 3)]
        backend.train_step(batch, AdamParams(learning_rate=1e-5), 1)
        counts = backend.meter.take()
        wire = server.wire
        assert counts.prefill == sum(len(s["prompt"]) for s in wire.samples) == 8
        assert counts.sampled == sum(s["sampled_tokens"] for s in wire.samples) == 15
        assert counts.trained == sum(len(d["target_tokens"]) for d in wire.forward_backward[-1]["datums"]) == 7
        assert backend.meter.take().trained == 0  # taken once
        backend.close("success")


@pytest.mark.anyio
async def test_a_run_reports_the_servers_tokens_and_ends_at_its_cost_cap_with_the_checkpoint_kept(
    tmp_path: Path, tiny_tokenizer: str
) -> None:
    # A step trains 4 sequences of 5 input tokens (20 trained tokens, $8.8e-6 at Qwen3-8B's rate)
    # plus whatever was sampled before it: a $1.5e-5 cap is less than two such steps, so the run
    # ends after its first step, before the second would pass it.
    config = tinker_run_config(
        tmp_path, tiny_tokenizer, num_steps=3, batch_size=4, group_size=2, run_id="costcap", max_cost_usd=1.5e-5
    )
    async with trainer_on_the_wire(config, tmp_path, tiny_tokenizer, {"MCP_RL_TINKER_CHECKPOINT_TTL": "86400"}) as run:
        await run.post(*[scored_group([1.0, 0.0]), scored_group([0.0, 1.0])] * 3)
        assert await run.finish() == 0
    wire, settings = run.wire, run.settings

    # Training steps' lines (a step-0 line of the base model's evaluation may come first).
    lines = [m for m in map(json.loads, config.paths.metrics.read_text().splitlines()) if m["step"] >= 1]
    assert [m["step"] for m in lines] == [1]
    line = lines[0]
    received = sum(len(d["target_tokens"]) for d in wire.forward_backward[0]["datums"])
    assert line[COST_TRAINED_TOKENS_KEY] == received == 20
    # The groups were posted, not sampled: what Tinker sampled before the step (the base model's
    # held-out evaluation, when the environment has one) is the step's sampling.
    before = [x for x in wire.samples if x["arrived"] < wire.forward_backward[0]["arrived"]]
    assert line[COST_SAMPLED_TOKENS_KEY] == sum(x["sampled_tokens"] for x in before)
    assert line[COST_PREFILL_TOKENS_KEY] == sum(len(x["prompt"]) for x in before)
    rates = tinker_rates(settings, config.trainer.base_model).rates
    assert rates is not None
    step_tokens = (line[COST_PREFILL_TOKENS_KEY], line[COST_SAMPLED_TOKENS_KEY], 20)
    assert line[COST_STEP_USD_KEY] == pytest.approx(
        (step_tokens[0] * rates.prefill + step_tokens[1] * rates.sample + step_tokens[2] * rates.train) / 1e6
    )
    assert line[COST_TOTAL_USD_KEY] == pytest.approx(line[COST_STEP_USD_KEY])

    status = json.loads(config.paths.trainer_status.read_text())
    assert status["phase"] == "stopped" and status["step"] == 1
    assert status["stop_cause"].startswith("cost cap reached at $")
    # The checkpoint saved at the stop is kept: no expiry on the service.
    records = [json.loads(x) for x in config.paths.checkpoints_index.read_text().splitlines()]
    assert {r["step"] for r in records} == {1}
    saved = {s["path"]: s["ttl_seconds"] for s in wire.saves if s["kind"] != "ephemeral"}
    assert records and all(saved[r["path"]] is None for r in records)
    assert len(wire.forward_backward) == 1
    # What the model said is kept to read (issue 34): both groups of the step, rewards and advantages.
    kept = read_rollouts(config.paths.run_dir / ROLLOUTS_FILE)
    assert [(g.step, g.group, g.signal) for g in kept] == [(1, 0, True), (1, 1, True)]
    for group in kept:
        assert sorted(a.reward for a in group.answers) == [0.0, 1.0]
        assert all((a.advantage > 0) == (a.reward == 1.0) for a in group.answers)
