"""The length monitor on a real run, through a real stdio client (issue 44): a task whose training
reward pays for length (tests/fixtures/tasks/longer_pays.py: min(1, characters / 240), while its
held-out items are scored for the exact answer) is trained 10 steps (batch 16); rl_check_status and
rl_get_results then warn that the answers grew longer while the held-out score did not rise, with
the numbers and advice."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mcp import Client

from mcp_rl.rundir import COMPLETION_TOKENS_KEY, METRICS_FILE
from mcp_rl.supervisor import service
from tests.conftest import stdio_params
from tests.kit.mcp import REPO, fixture_task, ok, run_to_end
from tests.kit.runs import TEST_HELD_OUT_LIMIT

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

FIXTURE = REPO / "tests" / "fixtures" / "tasks" / "longer_pays.py"
RUN_DEADLINE_S = 900.0
# Ten steps: the monitor's windows are 5 + 5 (the smallest p 1/252). With 8 (4 + 4, the fewest it
# calls) it fired, but at p = 0.04: the few-shot examples hold the answers short for the first
# steps, then they grow (measured 11, 12, 12, 21, 16, 18, 30 ... tokens). Four groups of 4 a step.
RUN = {"total_steps": 10, "batch_size": 16, "held_out_limit": TEST_HELD_OUT_LIMIT}


async def test_a_reward_that_pays_for_length_gets_the_length_warning(
    home: Path, default_model: Path, tmp_path: Path
) -> None:
    extra, settings = fixture_task(home, default_model, tmp_path, FIXTURE)
    run_id = ""
    try:
        async with Client(stdio_params(home, **extra)) as client:
            await ok(client, "rl_select_environment", {"name": "longer_pays"})
            for field, value in RUN.items():
                await ok(client, "rl_edit_config", {"field": field, "value": value})
            run_id = (await ok(client, "rl_start_training"))["run_id"]
            status = await run_to_end(client, run_id, RUN_DEADLINE_S)
            assert status["status"] == "completed", status
            run_dir = Path(service.registry_for(settings).get_run(run_id).run_dir)
            lines = [json.loads(line) for line in (run_dir / METRICS_FILE).read_text().splitlines() if line.strip()]
            lengths = [(r["step"], round(r[COMPLETION_TOKENS_KEY], 1)) for r in lines if COMPLETION_TOKENS_KEY in r]
            print(f"completion tokens by step: {lengths}; held-out: {status['held_out']['sentence']}")
            assert [s for s, _ in lengths] == list(range(1, RUN["total_steps"] + 1))

            signal = status["learning_signal"]
            fired = {m["monitor"]: m for m in signal["monitors"]}
            assert "length_drift" in fired, (lengths, signal)
            warning = fired["length_drift"]["warning"]
            assert "Answers are getting longer while the held-out score does not rise" in warning
            assert "steps 1-5" in warning and "steps 6-10" in warning and "permutation test" in warning
            assert f"{TEST_HELD_OUT_LIMIT} held-out items" in warning and "McNemar" in warning
            assert any("rl_get_rollouts" in a for a in fired["length_drift"]["advice"])
            assert warning in status["message"]
            (length,) = [t for t in signal["trends"] if t["metric"] == COMPLETION_TOKENS_KEY]
            assert length["recent"] >= 1.5 * length["first"] and length["p_value"] < 0.05

            results = await ok(client, "rl_get_results", {"run_id": run_id})
            assert [m["warning"] for m in results["learning_signal"]["monitors"] if m["monitor"] == "length_drift"] == [
                warning
            ]
    finally:
        record = service.registry_for(settings).get_run(run_id) if run_id else None
        if record is not None and record.active:
            service.stop_run(settings, run_id)
