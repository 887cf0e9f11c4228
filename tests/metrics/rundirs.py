"""Synthetic run directories in the run folder's formats (mcp_rl.rundir), for unit tests.

A real local run is exercised by test_real_run.py; these let the reading code be tested on any
length of run (2,000 steps) and any damage (partial lines) in milliseconds.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

from mcp_rl.runconfig import WandbSettings
from mcp_rl.rundir import CheckpointRecord, TrainerPhase, TrainerStatus
from mcp_rl.settings import Settings
from tests.kit.runs import run_config
from tests.records import run_record


def reward_at(step: int, steps: int) -> float:
    """A rising, noisy-looking but deterministic reward curve with one dip at steps//3."""
    value = step / steps + 0.05 * math.sin(step)
    return value - 0.5 if step == steps // 3 else value


def loss_at(step: int) -> float:
    return 1.0 / step


def write_run(
    settings: Settings,
    run_id: str,
    steps: int,
    *,
    state: str | None = "completed",
    wandb_enabled: bool = False,
    with_weights: bool = True,
    env_metrics: bool = False,
) -> Path:
    run_dir = settings.runs_dir / run_id
    config = run_config(
        run_dir,
        run_id=run_id,
        env={"group_size": 4, "batch_size": 8, "total_steps": steps},
        openai=[{"model_name": "m", "base_url": "http://127.0.0.1:1/v1", "api_key": "x"}],
        base_model="/nowhere/model",
        num_steps=steps,
        batch_size=8,
        group_size=4,
        wandb=WandbSettings(enabled=wandb_enabled, project="mcp-rl", group=run_id),
        dump=True,
    )
    paths = config.paths
    now = time.time()
    with open(paths.metrics, "w", encoding="utf-8") as fh:
        for step in range(1, steps + 1):
            row = {
                "step": step,
                "time": now + step,
                "train/loss": loss_at(step),
                "reward/mean": reward_at(step, steps),
                "advantages/mean": 0.0,
                "tokens": 100,
                "time/step_seconds": 1.0,
            }
            fh.write(json.dumps(row) + "\n")
    if env_metrics:
        with open(run_dir / "env_metrics.jsonl", "w", encoding="utf-8") as fh:
            for step in range(1, steps + 1):
                fh.write(json.dumps({"step": step, "time": now, "train/percent_correct": step / (2 * steps)}) + "\n")
            fh.write(json.dumps({"step": steps, "time": now, "eval/percent_correct": 0.75}) + "\n")
    weights = paths.checkpoints_dir / f"step_{steps}"
    if with_weights:
        weights.mkdir(parents=True)
        (weights / "adapter_config.json").write_text("{}")
        with open(paths.checkpoints_index, "w", encoding="utf-8") as fh:
            fh.write(
                CheckpointRecord(step=steps, kind="sampler", path=str(weights), time=now, final=True).model_dump_json()
                + "\n"
            )
    status = TrainerStatus(
        phase=TrainerPhase.DONE if state == "completed" else TrainerPhase.TRAINING,
        step=steps,
        num_steps=steps,
        heartbeat=now,
        pid=1,
        final_weights=str(weights) if with_weights else None,
    )
    paths.trainer_status.write_text(status.model_dump_json())
    if state is not None:
        register(settings, run_id, run_dir, state)
    return run_dir


def register(settings: Settings, run_id: str, run_dir: Path, state: str) -> None:
    """A registry row for the run, as the supervisor records it."""
    from mcp_rl.supervisor.registry import Registry
    from mcp_rl.supervisor.states import RunState

    Registry(settings.state_db).create_run(run_record(run_id, run_dir, environment="toy", state=RunState(state)))
