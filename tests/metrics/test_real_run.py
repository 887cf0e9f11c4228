"""rl_get_results on a real local run, through the real `mcp-rl serve` over stdio: the session's
shared completed run (tests/kit/shared_run.py), made by a client subscribed to it.

Every part is real: supervisor, Atropos run-api, the trainer with the embedded SmolLM2-135M
model, the bundled `arithmetic` environment (whose metrics are captured by the runner hook).
"""

from __future__ import annotations

import base64
import io
import json
import time
from pathlib import Path

import pytest
from mcp import Client
from mcp.types import ImageContent

from mcp_rl.metrics import store
from mcp_rl.metrics.plot import HEIGHT_PX, WIDTH_PX
from tests.kit.shared_run import CompletedRun

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


async def test_results_of_a_real_local_run(completed_run: CompletedRun) -> None:
    run_id, updates = completed_run.run_id, completed_run.updates
    uri = completed_run.uri
    # While it ran, results answered too (partial, no error).
    early_error, early_text = completed_run.early_results
    assert not early_error, early_text
    assert completed_run.statuses[-1] == "completed", completed_run.statuses

    async with Client(completed_run.params()) as client:
        started = time.perf_counter()
        result = await client.call_tool("rl_get_results", {"run_id": run_id})
        elapsed = time.perf_counter() - started
        assert not result.is_error, result.content[0].text
        data = result.structured_content
        run_dir = Path(data["run_dir"])

        # The real final reward: the trainer's last metrics line.
        rows = store.read_jsonl(run_dir / "metrics.jsonl").rows
        last = rows[-1]
        assert data["state"] == "completed" and data["steps_completed"] == last["step"] == 2
        reward = data["metrics"]["reward/mean"]
        assert reward["final"] == last["reward/mean"] and reward["final_step"] == 2
        assert reward["best"] == max(r["reward/mean"] for r in rows if "reward/mean" in r)  # step 0 only evaluates
        assert data["metrics"]["train/loss"]["final"] == last["train/loss"]
        assert [p["step"] for p in data["history"]] == [1, 2]

        # A weights path that exists.
        weights = data["weights"]
        assert weights["sampler_weights"] and weights["sampler_exists"] is True
        assert Path(weights["sampler_weights"]).exists() and weights["sampler_step"] == 2

        image = next(c for c in result.content if isinstance(c, ImageContent))
        from PIL import Image

        png = Image.open(io.BytesIO(base64.b64decode(image.data)))
        png.load()
        assert png.size == (WIDTH_PX, HEIGHT_PX)

        # What the environment logged (Atropos wandb_log, W&B off here) reached the results: the
        # env logs when the API's step moves past 0, after the 2 groups of the first batch.
        env_lines = store.read_jsonl(run_dir / "env_metrics.jsonl").rows
        correct = [r for r in env_lines if "train/percent_correct" in r]
        assert correct, env_lines
        summary = data["metrics"]["train/percent_correct"]
        assert summary["final"] == correct[-1]["train/percent_correct"] and summary["final_step"] == correct[-1]["step"]

    # The subscribed client heard the run change (state changes and steps landing).
    assert uri in updates, updates

    print(
        f"real run {run_id}: rl_get_results {elapsed:.3f} s; reward {reward}; "
        f"{len(updates)} notifications; env metrics keys "
        f"{sorted({k for r in env_lines for k in r})}; weights {weights['sampler_weights']}"
    )
    print(json.dumps(data["notes"]))
