"""Issue 44, through a real stdio client: a task no model can learn beyond "always answer 0" (its
answers are a 9-to-1 coin flip the prompt does not show; the reply's first digit counts) is
trained for a few steps at a high learning rate. Whatever the paired test says against the base, rl_check_status,
rl_get_results and rl_evaluate_checkpoint all say "not shown to have learned", with the constant
answer "0" as the baseline and the same sentence; the checkpoint evaluation's sample pairs show
the items' reference answers, never their index."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from mcp_rl.supervisor import service
from tests.conftest import stdio_params
from tests.kit.mcp import fixture_task, ok

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
FIXTURE = REPO / "tests" / "fixtures" / "tasks" / "mostly_zero.py"
RUN_DEADLINE_S = 480.0
# Few, large steps: GRPO pays "0" (right nine times in ten) and the adapter moves far per step.
RUN = {"total_steps": 6, "batch_size": 16, "group_size": 4, "learning_rate": 5e-3, "held_out_limit": 40}


async def _until(client: Client, tool: str, args: dict[str, Any], done: Any, deadline_s: float) -> dict[str, Any]:
    end = time.monotonic() + deadline_s
    while True:
        answer = await ok(client, tool, args)
        if done(answer) or time.monotonic() > end:
            return answer
        await anyio.sleep(1.0)


def _not_learned(verdict: dict[str, Any], where: str) -> None:
    assert verdict["learned"] is False, (where, verdict)
    assert verdict["sentence"].startswith("Not shown to have learned the task"), (where, verdict["sentence"])
    baseline = verdict["constant_baseline"]
    # "0", or the trained model's own "The correct answer is 0.": its first digit is "0"
    assert baseline is not None and re.search(r"\d", baseline["answer"]).group() == "0", (where, baseline)
    assert baseline["score"] >= 0.9, (where, baseline)
    assert (
        f"{baseline['score']:.2f}" in verdict["sentence"] and f'answering "{baseline["answer"]}"' in verdict["sentence"]
    )


async def test_a_task_learned_only_as_a_constant_is_not_certified(
    home: Path, default_model: Path, tmp_path: Path
) -> None:
    extra, settings = fixture_task(home, default_model, tmp_path, FIXTURE)
    run_id = ""
    try:
        async with Client(stdio_params(home, **extra)) as client:
            await ok(client, "rl_select_environment", {"name": "mostly_zero"})
            for field, value in RUN.items():
                await ok(client, "rl_edit_config", {"field": field, "value": value})
            started = await ok(client, "rl_start_training")
            run_id = started["run_id"]
            status = await _until(
                client,
                "rl_check_status",
                {"run_id": run_id},
                lambda a: a["status"] in ("completed", "failed", "stopped"),
                RUN_DEADLINE_S,
            )
            assert status["status"] == "completed", status
            held = status["held_out"]
            assert held["n"] == RUN["held_out_limit"] and held["step"] == RUN["total_steps"], held
            answers = held["answers"]
            print(
                f"mostly_zero, {RUN['total_steps']} steps: {held['sentence']} Trained answers: "
                f"{answers['top_share']:.0%} {answers['top_answer']!r} ({answers['distinct_share']:.0%} distinct); "
                f"warnings: {held['warnings']}"
            )
            _not_learned(held, "rl_check_status")
            results = await ok(client, "rl_get_results", {"run_id": run_id})
            _not_learned(results["held_out"], "rl_get_results")
            assert results["held_out"]["sentence"] == held["sentence"]
            assert results["held_out"]["warnings"] == held["warnings"]

            evaluation = await ok(client, "rl_evaluate_checkpoint", {"run_id": run_id})
            end = time.monotonic() + 300
            while evaluation["state"] == "running" and time.monotonic() < end:
                evaluation = await ok(client, "rl_get_evaluation", {"eval_id": evaluation["eval_id"], "wait_s": 30})
            assert evaluation["state"] == "completed", evaluation["message"]
            _not_learned(evaluation, "rl_evaluate_checkpoint")
            assert evaluation["message"].startswith("Not shown to have learned the task")
            # The same weights, items and greedy sampling as the run's last evaluation: the same verdict.
            assert evaluation["constant_baseline"]["score"] == pytest.approx(held["constant_baseline"]["score"])
            if answers["top_share"] >= 0.8:  # said alike by all three (shares may differ by an item: fold vs merge)
                assert evaluation["answers"]["top_answer"] == answers["top_answer"]
                for said in (held["warnings"], results["held_out"]["warnings"], evaluation["warnings"]):
                    assert any("answer collapse" in w for w in said), said
            for sample in evaluation["comparisons"][0]["samples"]:
                assert sample["answer"] in ("0", "1"), sample  # the item's reference, not its index
    finally:
        record = service.registry_for(settings).get_run(run_id) if run_id else None
        if record is not None and record.active:
            service.stop_run(settings, run_id)
