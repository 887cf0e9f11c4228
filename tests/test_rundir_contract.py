"""The run folder's contract (mcp_rl.rundir): what the real writers write, every reader reads.

The trainer's `RunRecorder` (with the trainer's own metric builder) and the environment's metrics
capture write a run folder; the metrics store, the results, the supervisor's verdict on the
trainer's exit, the registry's rebuild from the folder and the run service's status read it.
A field or key renamed on the writer's side fails here, in the fast tier, instead of only in the
end-to-end tests. Fast tier: no model, no processes.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from mcp_rl.environments import env_metrics
from mcp_rl.metrics import store
from mcp_rl.rundir import (
    ENV_METRICS_FILE,
    LOSS_KEY,
    PERCENT_CORRECT_KEY,
    REWARD_KEY,
    RunPaths,
    TrainerPhase,
    read_jsonl_head,
    read_jsonl_tail,
)
from mcp_rl.settings import Settings
from mcp_rl.supervisor import results, service
from mcp_rl.supervisor.rebuild import run_record_from_dir
from mcp_rl.supervisor.registry import Registry, RunRecord
from mcp_rl.supervisor.states import RunState
from mcp_rl.supervisor.supervisor import RunSupervisor
from mcp_rl.trainer.advantages import BatchStats
from mcp_rl.trainer.loop import batch_metrics
from mcp_rl.trainer.status import RunRecorder, last_state
from tests.kit.runs import run_config

STEPS = 2
REWARDS = {1: 0.25, 2: 0.75}
LOSSES = {1: 0.5, 2: 0.125}
WANDB_URL = "https://wandb.ai/team/mcp-rl/runs/abc"


def _stats(reward: float) -> BatchStats:
    return BatchStats(
        reward_mean=reward,
        reward_std=0.1,
        reward_min=0.0,
        reward_max=1.0,
        groups=2,
        sequences=8,
        zero_signal_groups=0,
        tokens=400,
        trained_tokens=300,
        advantages_mean=0.0,
        advantages_std=1.0,
        per_token_advantages_groups=0,
    )


def write_run(settings: Settings, run_id: str, *, fail_at: int | None = None) -> RunPaths:
    """A run folder as the trainer writes it, phase by phase (the path of mcp_rl.trainer.loop)."""
    paths = RunPaths.for_run(settings.runs_dir / run_id)
    run_config(
        paths.run_dir,
        run_id=run_id,
        env={"group_size": 4, "batch_size": 8},
        openai=[{"model_name": "m", "base_url": "http://127.0.0.1:1/v1", "api_key": "x"}],
        base_model="/nowhere/model",
        num_steps=STEPS,
        batch_size=8,
        group_size=4,
    ).dump(paths.run_dir / "run.yaml")
    recorder = RunRecorder(paths, STEPS)
    recorder.update(phase=TrainerPhase.STARTING)
    recorder.update(phase=TrainerPhase.LOADING_MODEL)
    recorder.update(wandb_url=WANDB_URL)
    for step in range(1, STEPS + 1):
        recorder.update(phase=TrainerPhase.WAITING_FOR_BATCH)
        recorder.update(phase=TrainerPhase.TRAINING)
        if step == fail_at:
            recorder.update(phase=TrainerPhase.FAILED, error="RuntimeError: boom")
            return paths
        sampler = str(paths.checkpoints_dir / f"step_{step}" / "sampler")
        recorder.checkpoint(step, "sampler", sampler)
        recorder.metrics(step, {LOSS_KEY: LOSSES[step], **batch_metrics(_stats(REWARDS[step]))})
        recorder.update(step=step)
        env_metrics.append_metrics(paths.run_dir / ENV_METRICS_FILE, step, {PERCENT_CORRECT_KEY: step / 4})
    recorder.update(phase=TrainerPhase.SAVING)
    final = paths.checkpoints_dir / f"step_{STEPS}"
    (final / "sampler").mkdir(parents=True)
    recorder.checkpoint(STEPS, "state", str(final / "state"), final=True)
    recorder.update(resume_state=str(final / "state"))
    recorder.checkpoint(STEPS, "sampler", str(final / "sampler"), final=True)
    recorder.update(phase=TrainerPhase.DONE, final_weights=str(final / "sampler"))
    return paths


def _register(settings: Settings, run_id: str, state: RunState) -> None:
    """The supervisor's row for the run (recorded before its folder, as the server does)."""
    now = time.time()
    run_dir = RunPaths.for_run(settings.runs_dir / run_id).run_dir
    Registry(settings.state_db).create_run(
        RunRecord(
            run_id=run_id,
            environment="toy",
            backend="local",
            state=state,
            created_at=now,
            updated_at=now,
            ended_at=now,
            run_dir=str(run_dir),
            config_path=str(run_dir / "run.yaml"),
        )
    )


def _supervisor(paths: RunPaths, settings: Settings) -> RunSupervisor:
    return RunSupervisor(paths.run_dir.name, Registry(settings.state_db), [], paths.trainer_status)


@pytest.fixture
def done(settings: Settings) -> RunPaths:
    settings.ensure_home()
    _register(settings, "done1", RunState.COMPLETED)
    return write_run(settings, "done1")


def test_the_metrics_store_reads_what_the_trainer_wrote(done: RunPaths) -> None:
    table = store.read_step_table(done.run_dir)
    assert table.trainer_last_step == STEPS and table.bad_lines == 0 and not table.problems
    summary = store.summarise(table, store.summary_keys(table))
    assert summary[REWARD_KEY].final == REWARDS[2] and summary[REWARD_KEY].best_step == 2
    assert summary[LOSS_KEY].final == LOSSES[2] and summary[LOSS_KEY].goal == "min"
    assert summary[PERCENT_CORRECT_KEY].final == 0.5  # the environment's line, merged by step
    assert [(p.step, p.reward_mean, p.loss) for p in store.history(table)] == [(1, 0.25, 0.5), (2, 0.75, 0.125)]
    status = store.read_trainer_status(done.run_dir)
    assert status is not None and status.phase == TrainerPhase.DONE and status.step == STEPS
    assert status.num_steps == STEPS and status.wandb_url == WANDB_URL and status.heartbeat
    weights = store.weights_info(store.read_checkpoints(done.run_dir), status)
    assert weights.final and weights.sampler_step == STEPS and weights.sampler_exists
    # The final save's line for step 2's sampler supersedes its periodic one: 3 checkpoints, not 4 lines.
    assert weights.resume_step == STEPS and weights.checkpoints_saved == STEPS + 1
    assert store.damage_report(done.run_dir) == []
    state = last_state(done.checkpoints_index)  # the trainer's own resume reader
    assert state is not None and state.step == STEPS and state.final


def test_the_results_read_what_the_trainer_wrote(settings: Settings, done: RunPaths) -> None:
    answer, _ = results.local_results(settings, "done1")
    assert answer.trainer_phase == TrainerPhase.DONE and answer.state == "completed"
    assert answer.steps_completed == STEPS and answer.num_steps == STEPS
    assert answer.metrics[REWARD_KEY].final == REWARDS[2] and answer.metrics[LOSS_KEY].best == LOSSES[2]
    assert answer.weights.sampler_weights == str(done.checkpoints_dir / f"step_{STEPS}" / "sampler")
    assert answer.wandb_url == WANDB_URL and answer.notes == []


def test_the_run_service_reads_what_the_trainer_wrote(settings: Settings, done: RunPaths) -> None:
    status = service.run_status(settings, "done1")
    assert status.trainer_phase == TrainerPhase.DONE and status.wandb_url == WANDB_URL
    assert status.metrics is not None
    assert (status.metrics.step, status.metrics.num_steps) == (STEPS, STEPS)
    assert status.metrics.reward_mean == REWARDS[2] and status.metrics.loss == LOSSES[2]
    assert status.metrics.percent_correct == 0.5 and not status.notes
    [row] = service.list_runs(settings).runs
    assert row.latest_reward == REWARDS[2]


def test_the_supervisor_and_the_registry_read_how_the_trainer_ended(settings: Settings, done: RunPaths) -> None:
    # The trainer exited 0: the supervisor calls the run completed only on the phase "done".
    verdict = _supervisor(done, settings)._trainer_verdict()
    assert verdict.state == RunState.COMPLETED and verdict.cause == f"trainer finished step {STEPS} of {STEPS}"
    assert run_record_from_dir(done.run_dir, supervisors={}).state == RunState.COMPLETED

    _register(settings, "failed1", RunState.FAILED)
    failed = write_run(settings, "failed1", fail_at=2)
    # The trainer exited 1: the supervisor adds what the trainer recorded.
    assert _supervisor(failed, settings)._trainer_error() == " Trainer error: RuntimeError: boom"
    record = run_record_from_dir(failed.run_dir, supervisors={})
    assert record.state == RunState.FAILED and "phase 'failed': RuntimeError: boom" in (record.cause or "")
    answer, _ = results.local_results(settings, "failed1")
    assert answer.trainer_phase == TrainerPhase.FAILED and "Trainer error: RuntimeError: boom" in answer.notes
    assert answer.steps_completed == 1


def test_the_tail_of_a_long_jsonl_is_read_from_its_end_skipping_damage(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    lines = [f'{{"step": {step}, "pad": "{"x" * 200}"}}' for step in range(1, 20001)]
    lines[-3] = "{damaged"
    path.write_text("\n".join(lines) + "\n" + '{"step": 20001, "half-writ')
    assert [row["step"] for row in read_jsonl_tail(path, 5)] == [19995, 19996, 19997, 19999, 20000]
    # Bounded: a file of only damaged lines yields nothing rather than reading all 4.8 MB.
    assert read_jsonl_tail(path, 5, max_bytes=100) == []
    assert read_jsonl_tail(tmp_path / "missing.jsonl", 5) == [] and read_jsonl_tail(path, 0) == []
    short = tmp_path / "short.jsonl"
    short.write_text('{"step": 1}\n{"step": 2}\n')
    assert read_jsonl_tail(short, 5) == [{"step": 1}, {"step": 2}]


def test_the_head_of_a_long_jsonl_is_read_from_its_start_skipping_damage(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    lines = [f'{{"step": {step}, "pad": "{"x" * 200}"}}' for step in range(1, 20001)]
    lines[1] = "{damaged"
    path.write_text("\n".join(lines) + "\n")
    assert [row["step"] for row in read_jsonl_head(path, 4)] == [1, 3, 4, 5]
    # Bounded: a line cut by the bound is not read, nothing past it either.
    assert [row["step"] for row in read_jsonl_head(path, 5, max_bytes=500)] == [1, 3]
    assert read_jsonl_head(tmp_path / "missing.jsonl", 5) == [] and read_jsonl_head(path, 0) == []
