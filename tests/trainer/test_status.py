"""The trainer's run-dir records, in the formats the supervisor and results readers expect."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mcp_rl.rundir import IllegalPhaseChange, RunPaths, TrainerPhase, read_checkpoints
from mcp_rl.trainer.status import RunRecorder, last_metrics_step, last_state


def test_records_have_the_brief_formats(tmp_path: Path) -> None:
    paths = RunPaths.for_run(tmp_path / "run")
    rec = RunRecorder(paths, num_steps=5)
    for phase in ("starting", "loading_model", "waiting_for_batch", "training"):
        rec.update(phase=phase)
    rec.update(step=1)
    status = json.loads(paths.trainer_status.read_text())
    assert set(status) == {
        "phase",
        "step",
        "num_steps",
        "heartbeat",
        "pid",
        "final_weights",
        "resume_state",
        "error",
        "wandb_url",
        "model_wait_s",
        "startup",
        "stop_cause",
    }
    assert status["phase"] == "training" and status["num_steps"] == 5 and status["heartbeat"] > 0

    rec.metrics(1, {"train/loss": 0.5, "reward/mean": float("nan")})
    rec.metrics(2, {"train/loss": 0.25, "reward/mean": 1.0})
    lines = [json.loads(x) for x in paths.metrics.read_text().splitlines()]
    assert [x["step"] for x in lines] == [1, 2]
    assert lines[0]["reward/mean"] is None  # NaN would make the line unparsable JSON
    assert "time" in lines[0]
    assert last_metrics_step(paths.metrics) == 2

    rec.checkpoint(2, "state", "/x/step_2")
    rec.checkpoint(2, "sampler", "/x/step_2/adapter")
    rec.checkpoint(4, "state", "/x/step_4", final=True)
    recs = read_checkpoints(paths.checkpoints_index).records
    assert [(r.step, r.kind, r.final) for r in recs] == [(2, "state", False), (2, "sampler", False), (4, "state", True)]
    raw = json.loads(paths.checkpoints_index.read_text().splitlines()[0])
    assert set(raw) == {"step", "kind", "path", "time", "final", "kept", "expires_at"}
    latest = last_state(paths.checkpoints_index)
    assert latest is not None and latest.path == "/x/step_4"


def test_a_torn_last_line_is_skipped(tmp_path: Path) -> None:
    index = tmp_path / "checkpoints.jsonl"
    index.write_text('{"step": 3, "kind": "state", "path": "/a", "time": 1.0, "final": false}\n{"step": 4, "ki')
    latest = last_state(index)
    assert latest is not None and latest.step == 3
    assert last_state(tmp_path / "missing.jsonl") is None


def test_the_recorder_refuses_what_the_trainer_never_does(tmp_path: Path) -> None:
    paths = RunPaths.for_run(tmp_path / "run")
    rec = RunRecorder(paths, num_steps=5)
    rec.update(phase="loading_model")
    written = paths.trainer_status.read_text()
    with pytest.raises(IllegalPhaseChange):
        rec.update(phase="done")  # done only follows the final save
    with pytest.raises(ValueError, match="no field phse"):
        rec.update(phse="training")
    with pytest.raises(ValueError):
        rec.update(phase="compiling")
    with pytest.raises(ValueError):
        rec.update(step="three")
    assert paths.trainer_status.read_text() == written and rec.status.phase == TrainerPhase.LOADING_MODEL
    for phase in (
        "waiting_for_model",
        "waiting_for_model",
        "loading_model",
        "waiting_for_batch",
        "training",
        "saving",
        "done",
    ):
        rec.update(phase=phase)
    with pytest.raises(IllegalPhaseChange):
        rec.update(phase="failed")  # an ended trainer never changes phase
    assert rec.status.phase == TrainerPhase.DONE
