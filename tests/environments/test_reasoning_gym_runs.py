"""reasoning-gym as a family of its own, end to end through a stdio MCP client: its datasets are
listed (slow ones said so), a dataset and a weighted mixture of two are selected by `rg:` spec,
train locally for two steps, and have held-out figures from seeds training never reaches, per
dataset for the mixture."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from mcp_rl.proof.outcomes import evaluated_steps, read_outcomes
from mcp_rl.rundir import eval_outcomes_file
from tests.conftest import stdio_params
from tests.kit.mcp import ok, run_to_end

pytestmark = [pytest.mark.slow, pytest.mark.anyio, pytest.mark.timeout(1500)]

RUN_DEADLINE_S = 900.0
SHORT = {"total_steps": 2, "batch_size": 8, "group_size": 4, "held_out_size": 20, "max_new_tokens": 12}


async def _train(client: Client, name: str, home: Path, **edits: Any) -> tuple[dict[str, Any], Path]:
    await ok(client, "rl_select_environment", {"name": name})
    for field, value in {**SHORT, **edits}.items():
        await ok(client, "rl_edit_config", {"field": field, "value": value})
    run_id = (await ok(client, "rl_start_training"))["run_id"]
    status = await run_to_end(client, run_id, RUN_DEADLINE_S)
    assert status["status"] == "completed", status
    results = await ok(client, "rl_get_results", {"run_id": run_id})
    return results, home / "runs" / run_id


async def test_a_dataset_and_a_mixture_train_with_held_out_figures(home: Path, model_dir: Path) -> None:
    # A worktree's PYTHONPATH reaches the run's processes (else they import the installed mcp_rl).
    extra = {"PYTHONPATH": os.environ["PYTHONPATH"]} if os.environ.get("PYTHONPATH") else {}
    began = time.monotonic()
    async with Client(stdio_params(home, MCP_RL_MODEL=str(model_dir), **extra)) as client:
        listed = await ok(client, "rl_list_environments", {"filter": "rg:count"})
        by_id = {e["id"]: e for e in listed["gem_environments"]}
        assert "Slow to generate" in by_id["rg:countdown"]["description"]
        assert "min_numbers=4" in by_id["rg:countdown"]["description"]

        single, run_dir = await _train(client, "rg:basic_arithmetic", home)
        held = single["held_out"]
        assert held is not None and (held["n"], held["base_step"], held["step"]) == (20, 0, 2), single
        assert held["paired"] and held["groups"] == []
        assert evaluated_steps(run_dir) == [0, 2]
        assert all(
            o.item.startswith("basic_arithmetic/1000000000+") for o in read_outcomes(eval_outcomes_file(run_dir, 0))
        )
        # The constant answers were graded by the dataset's own scorer inside evaluate(): exact, not a lower bound.
        assert all(o.constants for o in read_outcomes(eval_outcomes_file(run_dir, 2)))
        constant = held["constant_baseline"]
        assert constant is not None and constant["lower_bound"] is False, held
        assert "the environment's own scorer" in constant["source"] and held["learned"] is not None

        mixed, run_dir = await _train(
            client, "rg:leg_counting=1,basic_arithmetic=1", home, params='{"leg_counting": {"max_animals": 4}}'
        )
        assert "max_animals" in (run_dir / "run.yaml").read_text()
        held = mixed["held_out"]
        assert held is not None and held["n"] == 20, mixed
        assert [(g["group"], g["n"]) for g in held["groups"]] == [("basic_arithmetic", 10), ("leg_counting", 10)]
        assert all(g["constant_baseline"] and not g["constant_baseline"]["lower_bound"] for g in held["groups"]), held
        final = read_outcomes(eval_outcomes_file(run_dir, 2))
        assert sorted({o.group for o in final}) == ["basic_arithmetic", "leg_counting"]
        assert "train/leg_counting/percent_correct" in (run_dir / "env_metrics.jsonl").read_text()
    print(f"reasoning-gym: a dataset and a mixture trained and evaluated in {time.monotonic() - began:.1f} s")
