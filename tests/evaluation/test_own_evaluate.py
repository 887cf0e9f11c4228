"""Held-out proof for an Atropos environment written outside mcp-rl (it imports nothing from it),
with its own eval split and evaluate(): a short real run through a stdio MCP client has
held-out figures at step 0 and at the end in rl_check_status and rl_get_results, from the
environment's own evaluate() unchanged, and rl_evaluate_checkpoint compares the checkpoint
with its base through the same evaluate()."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from mcp import Client

from mcp_rl.proof.outcomes import evaluated_steps, read_outcomes
from mcp_rl.proof.stats import paired_comparison
from mcp_rl.rundir import eval_outcomes_file
from tests.conftest import stdio_params
from tests.kit.mcp import ok, run_to_end

pytestmark = [pytest.mark.slow, pytest.mark.anyio, pytest.mark.timeout(1200)]

FOLDER = Path(__file__).resolve().parents[1] / "fixtures" / "envs" / "own_eval"
EVAL_SIZE = 40
RUN_DEADLINE_S = 900.0


async def test_own_evaluate_gives_held_out_figures(home: Path, model_dir: Path) -> None:
    # A worktree's PYTHONPATH reaches the run's processes (else they import the installed mcp_rl).
    extra = {"PYTHONPATH": os.environ["PYTHONPATH"]} if os.environ.get("PYTHONPATH") else {}
    params = stdio_params(home, MCP_RL_MODEL=str(model_dir), MCP_RL_ENV_PATHS=str(FOLDER), **extra)
    began = time.monotonic()
    async with Client(params) as client:
        await ok(client, "rl_select_environment", {"name": "larger_number"})
        for name, value in {"total_steps": 2, "batch_size": 8, "group_size": 4, "eval_size": EVAL_SIZE}.items():
            await ok(client, "rl_edit_config", {"field": name, "value": value})
        run_id = (await ok(client, "rl_start_training"))["run_id"]
        status = await run_to_end(client, run_id, RUN_DEADLINE_S - (time.monotonic() - began))
        trained_s = time.monotonic() - began
        assert status["status"] == "completed", status
        results = await ok(client, "rl_get_results", {"run_id": run_id})
        run_dir = home / "runs" / run_id
        assert evaluated_steps(run_dir) == [0, 2]
        base = read_outcomes(eval_outcomes_file(run_dir, 0))
        final = read_outcomes(eval_outcomes_file(run_dir, 2))
        assert len(base) == len(final) == EVAL_SIZE
        assert {o.item for o in base} == {o.item for o in final}  # paired by the samples' `question`
        assert all(o.item.startswith("Which is larger") for o in base)
        by_item = {o.item: o.score for o in base}
        expected = paired_comparison([by_item[o.item] for o in final], [o.score for o in final])
        for held_out in (status["held_out"], results["held_out"]):
            assert held_out is not None, "held_out: null"
            assert (held_out["n"], held_out["base_step"], held_out["step"]) == (EVAL_SIZE, 0, 2)
            assert held_out["paired"] is True and held_out["test"] == expected.test
            assert held_out["p_value"] == pytest.approx(expected.p_value)
            assert (held_out["wins"], held_out["losses"]) == (expected.wins, expected.losses)

        began_eval = time.monotonic()
        answer = await ok(client, "rl_evaluate_checkpoint", {"run_id": run_id, "step": 2})
        while answer["state"] == "running":
            answer = await ok(client, "rl_get_evaluation", {"eval_id": answer["eval_id"], "wait_s": 30})
            assert time.monotonic() - began_eval < 600
        assert answer["state"] == "completed", answer["message"]
        assert answer["items"] == EVAL_SIZE
        (comparison,) = answer["comparisons"]
        stats = comparison["stats"]
        assert stats["n"] == EVAL_SIZE and stats["test"] == expected.test
        # The checkpoint's own evaluate() answers are the trained run's final ones (greedy, same weights).
        trained, base_model = answer["models"]
        mine = read_outcomes(Path(trained["outcomes_file"]))
        assert {o.item: o.score for o in mine} == {o.item: o.score for o in final}
        theirs = read_outcomes(Path(base_model["outcomes_file"]))
        assert {o.item: o.score for o in theirs} == by_item
    print(
        f"own-evaluate run: trained and evaluated in {trained_s:.1f} s; checkpoint evaluation {time.monotonic() - began_eval:.1f} s"
    )
