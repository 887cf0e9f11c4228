"""A real local-backend training run of a GEM environment through a stdio MCP client.

Everything is real: the `mcp-rl serve` subprocess, the supervisor, Atropos `run-api`, the trainer
with the embedded SmolLM2-135M model, and the bundled GemEnv playing game:GuessTheNumber-v0-easy
multi-turn episodes against the trainer's inference server. Kept tiny: 2 steps of 8 transitions.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mcp import Client

from tests.conftest import stdio_params
from tests.kit.mcp import ok, run_to_end

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

EASY = "game:GuessTheNumber-v0-easy"
RUN_DEADLINE_S = 900.0
SHORT = {
    "total_steps": 2,
    "group_size": 4,
    "batch_size": 8,
    "num_envs": 2,
    "max_tokens_per_turn": 6,
    "eval_episodes": 4,
}


async def test_gem_run_completes_with_episode_metrics(home: Path) -> None:
    async with Client(stdio_params(home)) as client:
        listed = await ok(client, "rl_list_environments", {"filter": "GuessTheNumber"})
        assert EASY in [e["id"] for e in listed["gem_environments"]]
        selected = await ok(client, "rl_select_environment", {"name": EASY})
        assert selected["class_name"] == "GemEnv"
        for field, value in SHORT.items():
            await ok(client, "rl_edit_config", {"field": field, "value": value})
        started = await ok(client, "rl_start_training")
        run_id = started["run_id"]
        assert started["backend"] == "local"
        status = await run_to_end(client, run_id, RUN_DEADLINE_S)
        assert status["status"] == "completed", status
        assert status["metrics"]["step"] == 2
        results = await ok(client, "rl_get_results", {"run_id": run_id})
    run_dir = Path(results["run_dir"])
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    # Held-out figures from GEM's fixed eval seeds: its own evaluate(), before step 1 and after the last.
    assert [s["step"] for s in lines] == [0, 1, 2]
    assert lines[0]["eval/n"] == lines[2]["eval/n"] == SHORT["eval_episodes"]
    held_out = results["held_out"]
    assert held_out is not None and (held_out["n"], held_out["base_step"], held_out["step"]) == (4, 0, 2)
    steps = lines[1:]
    for step in steps:
        # 8 transitions a step, each trained on the ReBN-normalised return of its turn.
        assert step["batch/sequences"] == 8 and abs(step["advantages/mean"]) < 0.5
        assert "logprobs/diff" in step and step["tokens/trained"] > 0
        # Sample-vs-train KL estimates and the sampled tokens' entropy, as the recipe logs them.
        assert step["train/kl_sample_train_v1"] == step["logprobs/diff"]
        assert step["train/kl_sample_train_v2"] >= 0 and step["sampler/token_entropy"] > 0
    env_lines = [json.loads(line) for line in (run_dir / "env_metrics.jsonl").read_text().splitlines()]
    gem = [m for m in env_lines if "gem/episode_return" in m]
    assert gem, env_lines
    for m in gem:
        assert 0.0 <= m["gem/success_rate"] <= 1.0 and 1.0 <= m["gem/turns_per_episode"] <= 4.0
        assert m["gem/action_tokens"] > 0 and m["gem/token_entropy"] > 0 and m["gem/dropped_episodes"] == 0
    run_yaml = (run_dir / "run.yaml").read_text()
    assert f"env_id: {EASY}" in run_yaml
