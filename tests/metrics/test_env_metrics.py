"""Capture of Atropos environment metrics through the real `BaseEnv.wandb_log`."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from mcp_rl.environments import env_metrics, eval_capture
from mcp_rl.metrics import store


class _Server:
    async def wandb_metrics(self, metrics: dict, name: str) -> dict:
        return {f"server/{name}_request_time_avg": 0.1}


def _toy_env_class():
    from atroposlib.envs.base import BaseEnv

    class ToyEnv(BaseEnv):
        """Logs like gsm8k: its own keys first, then the base class's."""

        name = "toy"

        async def setup(self):  # pragma: no cover - never run here
            pass

        async def get_next_item(self):  # pragma: no cover
            return None

        async def evaluate(self, *args, **kwargs):  # pragma: no cover
            pass

        async def wandb_log(self, wandb_metrics=None):
            wandb_metrics = {} if wandb_metrics is None else wandb_metrics
            wandb_metrics["train/percent_correct"] = self.percent
            for key, value in self.eval_metrics:
                wandb_metrics[key] = value
            self.eval_metrics = []
            await super().wandb_log(wandb_metrics)

    env = object.__new__(ToyEnv)
    # Only what BaseEnv.wandb_log reads; W&B itself stays off, as in a local run.
    env.__dict__.update(
        server=SimpleNamespace(servers=[_Server()]),
        completion_lengths=[10, 30],
        max_token_len=100,
        rollouts_for_wandb=[],
        task_duration=[],
        succeeded_task_duration=[],
        failed_task_duration=[],
        mainloop_timings=[],
        workers_added_list=[],
        config=SimpleNamespace(use_wandb=False),
        wandb_prepend="toy_0",
        curr_step=0,
        percent=0.0,
        eval_metrics=[],
    )
    return BaseEnv, env


@pytest.mark.anyio
async def test_wandb_log_calls_land_in_env_metrics_jsonl(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    base_env, env = _toy_env_class()
    # Restore the real method after the test: install() patches the class for the process.
    monkeypatch.setattr(base_env, "wandb_log", base_env.wandb_log)
    monkeypatch.setattr(eval_capture._Sinks, "run_metrics", None)
    (tmp_path / "run.yaml").write_text("run_id: x\n")
    path = eval_capture.install_for_run("serve", ["--config", str(tmp_path / "run.yaml")])
    assert path == tmp_path / "env_metrics.jsonl"
    eval_capture.install_for_run("serve", ["--config", str(tmp_path / "run.yaml")])  # idempotent: one line per call

    for step, percent in ((1, 0.25), (2, 0.5)):
        env.curr_step, env.percent = step, percent
        env.completion_lengths = [10, 30]
        if step == 2:
            env.eval_metrics = [("eval/percent_correct", 0.75)]
        await env.wandb_log({})

    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [line["step"] for line in lines] == [1, 2]
    assert lines[0]["train/percent_correct"] == 0.25 and lines[1]["eval/percent_correct"] == 0.75
    assert lines[0]["train/completion_lengths"] == 20.0  # the base class's own key, unprefixed
    assert "eval/percent_correct" not in lines[0]

    # And the results store merges them with the trainer's rows by step.
    (tmp_path / "metrics.jsonl").write_text(
        json.dumps({"step": 1, "reward/mean": 0.1}) + "\n" + json.dumps({"step": 2, "reward/mean": 0.2}) + "\n"
    )
    table = store.read_step_table(tmp_path)
    assert table.series("train/percent_correct") == [(1, 0.25), (2, 0.5)]
    assert table.series("eval/percent_correct") == [(2, 0.75)]


def test_no_capture_outside_a_run() -> None:
    assert eval_capture.install_for_run("process", ["--env.total_steps", "3"]) is None
    assert eval_capture.install_for_run("serve", ["--config", "/tmp/other.yaml"]) is None


def test_only_finite_numbers_are_kept() -> None:
    import numpy as np

    kept = env_metrics.numeric_metrics(
        {"a": np.float32(0.5), "b": 3, "c": float("nan"), "d": "text", "e": True, "f": object()}
    )
    assert kept == {"a": 0.5, "b": 3.0}
