"""Held-out figures for an Atropos environment whatever way its evaluate() reports (issue 45): an
environment of the public Atropos styles (tests/fixtures/envs/report_styles, importing nothing from
mcp-rl) trained one step through a stdio MCP client with a tiny eval split, unchanged, gets base and
trained figures, and the answer names the metric and where it came from.

The fast tier reads each of the five styles' reports (tests/evaluation/test_eval_capture.py); the
wiring from the run's processes to the answer is the same for every style, so this tier trains the
two that reach it differently: `self.eval_metrics` (read from the environment's own wandb_log) and
a bare `wandb.log` call. Per-item samples through `evaluate_log`, the paired path, are trained by
test_own_evaluate.py. One step, batch 4, 8 eval items: 36-80 s a style on 2 shared cores."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from mcp import Client

from tests.conftest import stdio_params
from tests.kit.mcp import ok, run_to_end

pytestmark = [pytest.mark.slow, pytest.mark.anyio, pytest.mark.timeout(900)]

FOLDER = Path(__file__).resolve().parents[1] / "fixtures" / "envs" / "report_styles"
EVAL_SIZE = 8
RUN_DEADLINE_S = 600.0
# environment -> (the metric the figures are, words of its source)
STYLES = {
    "style_eval_metrics": ("eval/percent_correct", "self.eval_metrics"),
    "style_wandb_direct": ("eval/acc", "wandb.log"),
}


@pytest.mark.parametrize("name", sorted(STYLES))
async def test_each_reporting_style_gets_held_out_figures(name: str, home: Path, model_dir: Path) -> None:
    metric, source = STYLES[name]
    extra = {"PYTHONPATH": os.environ["PYTHONPATH"]} if os.environ.get("PYTHONPATH") else {}
    params = stdio_params(home, MCP_RL_MODEL=str(model_dir), MCP_RL_ENV_PATHS=str(FOLDER), **extra)
    began = time.monotonic()
    async with Client(params) as client:
        await ok(client, "rl_select_environment", {"name": name})
        for field, value in {"total_steps": 1, "batch_size": 4, "group_size": 4, "eval_size": EVAL_SIZE}.items():
            await ok(client, "rl_edit_config", {"field": field, "value": value})
        run_id = (await ok(client, "rl_start_training"))["run_id"]
        status = await run_to_end(client, run_id, RUN_DEADLINE_S)
        assert status["status"] == "completed", status
        results = await ok(client, "rl_get_results", {"run_id": run_id})
    for held_out in (status["held_out"], results["held_out"]):
        assert held_out is not None, (results.get("held_out_note"), status.get("held_out_note"))
        assert (held_out["base_step"], held_out["step"]) == (0, 1)
        assert held_out["base_score"] is not None and held_out["trained_score"] is not None
        assert held_out["n"] == EVAL_SIZE
        assert held_out["paired"] is False  # aggregate scores: no per-item pairs
        assert metric in held_out["measure"] and source in held_out["measure"], held_out["measure"]
    print(f"{name}: {time.monotonic() - began:.1f} s; {results['held_out']['measure']}")
