"""rl_evaluate_checkpoint end to end: a local run's saved checkpoint (base + a real LoRA adapter)
against its base on arithmetic's held-out items, through a real MCP client; collected with
rl_get_evaluation. The figures must be the paired statistics of the per-item outcomes."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from mcp import Client

from mcp_rl.proof.outcomes import read_outcomes
from mcp_rl.proof.stats import paired_comparison
from mcp_rl.settings import Settings
from tests.conftest import make_env, stdio_params
from tests.kit.runs import write_local_checkpoint_run

pytestmark = [pytest.mark.slow, pytest.mark.anyio]

# The run's held_out_limit: its first 60 of 201 items, enough for the adapter to answer some
# differently from the base (the figures' wiring; the full set's cost is bench/bench_eval.py's).
HELD_OUT = 60


async def test_checkpoint_against_its_base(home: Path, model_dir: Path) -> None:
    settings = Settings.from_env(make_env(home))
    write_local_checkpoint_run(settings, "r1", model_dir, steps=(2, 4), held_out_limit=HELD_OUT)
    began = time.monotonic()
    progress: list[float] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append(value)

    async with Client(stdio_params(home)) as client:
        answer = await client.call_tool(
            "rl_evaluate_checkpoint", {"run_id": "r1", "step": 2}, progress_callback=on_progress
        )
        assert not answer.is_error, answer.content
        result = answer.structured_content
        while result["state"] == "running":
            assert f"rl_get_evaluation('{result['eval_id']}'" in result["message"]
            got = await client.call_tool("rl_get_evaluation", {"eval_id": result["eval_id"], "wait_s": 30})
            assert not got.is_error, got.content
            result = got.structured_content
            assert time.monotonic() - began < 600
        bad = await client.call_tool("rl_evaluate_checkpoint", {"run_id": "r1", "step": 3})
    elapsed = time.monotonic() - began
    assert result["state"] == "completed", result["message"]
    assert bad.is_error and "Saved steps: 2, 4" in bad.content[0].text
    n = result["items"]
    trained, base = result["models"]
    print(
        f"evaluation of {n} items x 2 models: {elapsed:.1f} s (trained {trained['seconds']} s, base {base['seconds']} s)"
    )
    assert n == HELD_OUT and result["checkpoint"]["model"] == "run:r1@2" and result["step"] == 2
    assert (trained["model"], trained["role"], base["role"]) == ("run:r1@2", "trained", "base")
    assert progress, "no progress notification"
    mine = read_outcomes(Path(trained["outcomes_file"]))
    theirs = read_outcomes(Path(base["outcomes_file"]))
    assert [o.item for o in mine] == [o.item for o in theirs] and len(mine) == n
    # The adapter is really there: base + adapter answers some items differently from the base.
    assert any(a.completion != b.completion for a, b in zip(mine, theirs, strict=True))
    (comparison,) = result["comparisons"]
    expected = paired_comparison([o.score for o in theirs], [o.score for o in mine])
    stats = comparison["stats"]
    assert stats["n"] == n and stats["p_value"] == pytest.approx(expected.p_value)
    assert (stats["base_score"], stats["trained_score"]) == pytest.approx((expected.base_score, expected.trained_score))
    assert comparison["improved_count"] == sum(a.score > b.score for a, b in zip(mine, theirs, strict=True))
    assert comparison["regressed_count"] == sum(a.score < b.score for a, b in zip(mine, theirs, strict=True))
    for sample in comparison["samples"]:
        assert sample["trained_score"] != sample["other_score"]
    assert stats["sentence"] in result["message"]
    assert json.dumps(result)
