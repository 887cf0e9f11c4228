"""rl_get_results on a real local run, through the real `mcp-rl serve` over stdio (2025-11-25
era, the way today's hosts connect), with a resource subscription on the run.

Every part is real: supervisor, Atropos run-api, the trainer with the embedded SmolLM2-135M
model, the bundled `arithmetic` environment (whose metrics are captured by the runner hook).
"""

from __future__ import annotations

import base64
import io
import json
import time
import warnings
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.types import ImageContent, ResourceUpdatedNotification

from mcp_rl.metrics import store
from mcp_rl.metrics.plot import HEIGHT_PX, WIDTH_PX
from tests.conftest import stdio_params
from tests.mcp_helpers import SHORT_RUN as SHORT
from tests.mcp_helpers import ok

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

RUN_DEADLINE_S = 900.0


async def test_results_of_a_real_local_run(home: Path) -> None:
    updates: list[str] = []

    async def on_message(message: Any) -> None:
        message = getattr(message, "root", message)
        if isinstance(message, ResourceUpdatedNotification):
            updates.append(str(message.params.uri))

    async with Client(
        stdio_params(home, MCP_RL_WATCH_INTERVAL="0.5"), mode="legacy", message_handler=on_message
    ) as client:
        await ok(client, "rl_select_environment", {"name": "arithmetic"})
        for field, value in SHORT.items():
            await ok(client, "rl_edit_config", {"field": field, "value": value})
        run_id = (await ok(client, "rl_start_training"))["run_id"]
        uri = f"rl://runs/{run_id}"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the 2025-11-25 way to subscribe
            await client.subscribe_resource(uri)

        # While it runs, results answer too (partial, no error).
        early = await client.call_tool("rl_get_results", {"run_id": run_id})
        assert not early.is_error, early.content[0].text

        with anyio.fail_after(RUN_DEADLINE_S):
            while True:
                status = await ok(client, "rl_check_status", {"run_id": run_id})
                if status["status"] in ("completed", "failed", "stopped"):
                    break
                await anyio.sleep(1.0)
        assert status["status"] == "completed", status

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
        assert reward["best"] == max(r["reward/mean"] for r in rows)
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
        with anyio.fail_after(10):
            while uri not in updates:
                await anyio.sleep(0.1)

    print(
        f"real run {run_id}: rl_get_results {elapsed:.3f} s; reward {reward}; "
        f"{len(updates)} notifications; env metrics keys "
        f"{sorted({k for r in env_lines for k in r})}; weights {weights['sampler_weights']}"
    )
    print(json.dumps(data["notes"]))
