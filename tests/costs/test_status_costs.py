"""A run's status carries the estimated cost so far and of the latest step from metrics.jsonl."""

from __future__ import annotations

import json
from pathlib import Path

from mcp_rl.rundir import COST_STEP_USD_KEY, COST_TOTAL_USD_KEY
from mcp_rl.supervisor import service


def test_the_status_headline_has_the_estimated_cost(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    lines = [
        {"step": 1, COST_STEP_USD_KEY: 0.25, COST_TOTAL_USD_KEY: 0.25},
        {"step": 2, COST_STEP_USD_KEY: 0.5, COST_TOTAL_USD_KEY: 0.75},
    ]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    metrics = service._metrics(path, {})
    assert metrics is not None
    assert (metrics.cost_usd_estimated, metrics.step_cost_usd_estimated) == (0.75, 0.5)
    # Not priced (rates unknown): None, never 0.
    path.write_text(json.dumps({"step": 1, COST_STEP_USD_KEY: None, COST_TOTAL_USD_KEY: None}) + "\n")
    metrics = service._metrics(path, {})
    assert metrics is not None and metrics.cost_usd_estimated is None
