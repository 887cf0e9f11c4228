"""A run's status carries the estimated cost so far and of the latest step from metrics.jsonl."""

from __future__ import annotations

import json
from pathlib import Path

from mcp_rl.rundir import COST_STEP_USD_KEY, COST_TOTAL_USD_KEY
from mcp_rl.supervisor import status


def test_the_status_headline_has_the_estimated_cost(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    lines = [
        {"step": 1, COST_STEP_USD_KEY: 0.25, COST_TOTAL_USD_KEY: 0.25},
        {"step": 2, COST_STEP_USD_KEY: 0.5, COST_TOTAL_USD_KEY: 0.75},
    ]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    metrics = status._metrics(path, {})
    assert metrics is not None
    assert (metrics.cost_usd_estimated, metrics.step_cost_usd_estimated) == (0.75, 0.5)
    # Not priced (rates unknown): None, never 0.
    path.write_text(json.dumps({"step": 1, COST_STEP_USD_KEY: None, COST_TOTAL_USD_KEY: None}) + "\n")
    metrics = status._metrics(path, {})
    assert metrics is not None and metrics.cost_usd_estimated is None


def test_results_sum_the_runs_tokens_and_the_plot_draws_its_spend(tmp_path: Path) -> None:
    from mcp_rl.costs.summary import run_cost
    from mcp_rl.metrics import store
    from mcp_rl.metrics.plot import render_png
    from mcp_rl.rundir import COST_PREFILL_TOKENS_KEY, COST_SAMPLED_TOKENS_KEY, COST_TRAINED_TOKENS_KEY

    def line(step: int, total: float) -> dict:
        return {
            "step": step,
            "reward/mean": 0.1 * step,
            "train/loss": 1.0 / step,
            COST_PREFILL_TOKENS_KEY: 10,
            COST_SAMPLED_TOKENS_KEY: 20,
            COST_TRAINED_TOKENS_KEY: 30,
            COST_STEP_USD_KEY: 0.5,
            COST_TOTAL_USD_KEY: total,
        }

    rows = [line(1, 0.5), line(2, 1.0), line(3, 1.5)]
    cost = run_cost(rows)
    assert cost is not None and cost.label == "estimated"
    assert (cost.prefill_tokens, cost.sampled_tokens, cost.trained_tokens, cost.total_usd) == (30, 60, 90, 1.5)
    assert cost.summary.startswith("Estimated cost so far: $1.50")
    unknown = run_cost([{**r, COST_STEP_USD_KEY: None, COST_TOTAL_USD_KEY: None} for r in rows])
    assert unknown is not None and unknown.total_usd is None and "unknown" in unknown.summary
    assert run_cost([{"step": 1}]) is None

    paid, free = tmp_path / "paid", tmp_path / "free"
    for folder, lines in ((paid, rows), (free, [{**r, COST_TOTAL_USD_KEY: 0.0} for r in rows])):
        folder.mkdir()
        (folder / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    paid_png = render_png(store.read_step_table(paid), "run")
    free_png = render_png(store.read_step_table(free), "run")
    assert paid_png.startswith(b"\x89PNG") and paid_png != free_png  # the spend line is drawn
