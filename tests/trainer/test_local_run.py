"""End to end on CPU: the real run-api, the trainer (local backend, the embedded model) and the
bundled `arithmetic` environment's `serve`, as separate processes."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from tests.kit.run_harness import LocalRun, free_port
from tests.kit.runs import TEST_HELD_OUT_LIMIT, arithmetic_run_config
from tests.kit.wait import wait_for

pytestmark = pytest.mark.slow


def model_dir() -> Path:
    return Path(os.environ["MCP_RL_MODEL"])


REQUIRED_METRICS = (
    "step",
    "time",
    "train/loss",
    "reward/mean",
    "advantages/mean",
    "advantages/std",
    "logprobs/mean",
    "logprobs/diff",
    "tokens",
    "time/step_seconds",
)


def test_three_steps_write_metrics_and_a_checkpoint_and_exit_0(tmp_path: Path) -> None:
    # 8 groups a step (the shipped batch): most arithmetic items are always or never right for
    # the base model. 2 groups a step left all 6 without signal in about one run in six (a group
    # dead about 3 times in 4), so 4 a step left all 12 so about one run in 36 (CI saw each);
    # 24 groups: about one in 1,000.
    config = arithmetic_run_config(
        tmp_path / "run",
        model_dir(),
        num_steps=3,
        batch_size=32,
        group_size=4,
        save_checkpoint_interval=2,
        held_out_limit=TEST_HELD_OUT_LIMIT,
    )
    with LocalRun(config, tmp_path / "home") as run:
        run.start_all()
        assert run.wait_trainer_exit(600) == 0, run.procs["trainer"].tail()
        metrics = run.metrics()
        status = run.status()
        checkpoints = run.checkpoints()
    # Step 0: the base model's held-out evaluation (its own line); the last step's line holds
    # the trained model's, compared with the base on the same items.
    assert [m["step"] for m in metrics] == [0, 1, 2, 3]
    base, metrics = metrics[0], metrics[1:]
    assert base["eval/n"] == TEST_HELD_OUT_LIMIT and 0.0 <= base["eval/score"] <= 1.0 and "reward/mean" not in base
    assert metrics[-1]["eval/n"] == base["eval/n"] and metrics[-1]["eval/base_score"] == base["eval/score"]
    assert metrics[-1]["eval/ci_low"] <= metrics[-1]["eval/difference"] <= metrics[-1]["eval/ci_high"]
    # Each evaluation's outcomes, what the best constant answer scores on the same items, and how
    # it sampled (a checkpoint evaluation reuses the base's step-0 answers only when they match).
    assert sorted(p.name for p in (config.paths.run_dir / "eval").iterdir()) == [
        "step_000000.constant.json",
        "step_000000.jsonl",
        "step_000000.sampling.json",
        "step_000003.constant.json",
        "step_000003.jsonl",
        "step_000003.sampling.json",
    ]
    # Every row says whether its generation stopped at max_tokens and whether it repeats the prompt.
    from mcp_rl.proof.outcomes import read_outcomes

    rows = read_outcomes(config.paths.run_dir / "eval" / "step_000003.jsonl")
    assert len(rows) == TEST_HELD_OUT_LIMIT
    assert all(isinstance(r.at_limit, bool) and isinstance(r.echo, bool) for r in rows)
    for line in metrics:
        # A step whose groups all scored alike trains nothing (no gradient to take), so it has
        # no training logprobs to report; it still says so in batch/trained_sequences.
        nothing_trained = line.get("batch/trained_sequences") == 0
        wanted = [k for k in REQUIRED_METRICS if not (nothing_trained and k.startswith("logprobs/"))]
        missing = [k for k in wanted if k not in line]
        assert not missing, f"metrics line lacks {missing}"
        assert 0.0 <= line["reward/mean"] <= 1.0
        assert line["tokens"] > 0 and line["time/step_seconds"] > 0
        # Sampler and trainer compute the same logprobs for the same weights (up to one step
        # of staleness); a mismatch in token alignment would show as a diff of whole nats.
        assert nothing_trained or abs(line["logprobs/diff"]) < 0.5
    assert any(line.get("batch/trained_sequences") for line in metrics), "no step trained anything"
    assert status["phase"] == "done" and status["step"] == 3 and status["error"] is None
    # Where the start-up went: every part measured, the model load the largest.
    startup = status["startup"]
    assert 0 < startup["interpreter_s"] < startup["backend_s"] and 0 < startup["serve_s"] < startup["backend_s"]
    final = Path(status["final_weights"])
    assert (final / "adapter_config.json").is_file() and any(final.glob("adapter_model.*"))
    states = [c for c in checkpoints if c["kind"] == "state"]
    assert [(c["step"], c["final"]) for c in states] == [(2, False), (3, True)]
    for c in states:
        assert (Path(c["path"]) / "trainer_state.pt").is_file()


def test_api_dying_mid_run_fails_the_trainer_with_a_clear_message(tmp_path: Path) -> None:
    config = arithmetic_run_config(
        tmp_path / "run",
        model_dir(),
        num_steps=50,
        batch_size=8,
        group_size=4,
        api_unreachable_timeout_s=5,
        held_out_limit=TEST_HELD_OUT_LIMIT,
    )
    with LocalRun(config, tmp_path / "home") as run:
        run.start_all()
        wait_for(
            lambda: any("reward/mean" in m for m in run.metrics()),
            300,
            "the first training step",
            watch=[run.procs["trainer"], run.procs["api"]],
        )
        # The heartbeat keeps coming between steps too (the supervisor detects hangs from it).
        seen = run.status()["heartbeat"]
        wait_for(lambda: run.status().get("heartbeat", 0) > seen, 5, "a fresh heartbeat", watch=[run.procs["trainer"]])
        run.procs["api"].signal_group(signal.SIGKILL)
        code = run.wait_trainer_exit(120)
        status = run.status()
        log = run.procs["trainer"].tail(200)
    assert code != 0
    assert status["phase"] == "failed"
    assert "Atropos API" in status["error"] and "has not answered" in status["error"]
    assert "logs/api.log" in status["error"]
    assert "trainer failed" in log


def test_a_stopped_run_resumes_at_the_next_step(tmp_path: Path) -> None:
    config = arithmetic_run_config(
        tmp_path / "run", model_dir(), num_steps=4, batch_size=8, group_size=4, held_out_limit=TEST_HELD_OUT_LIMIT
    )
    with LocalRun(config, tmp_path / "home") as run:
        run.start_all()
        wait_for(
            lambda: any("reward/mean" in m for m in run.metrics()),
            300,
            "the first training step",
            watch=[run.procs["trainer"], run.procs["api"]],
        )
        run.procs["trainer"].signal_group(signal.SIGTERM)
        assert run.wait_trainer_exit(120) == 0, run.procs["trainer"].tail()
        stopped = run.status()
        steps_before = [m["step"] for m in run.metrics()]
    assert stopped["phase"] == "stopped"
    assert stopped["final_weights"] and Path(stopped["final_weights"]).is_dir()
    last = steps_before[-1]
    assert 1 <= last < 4
    state = [c for c in run.checkpoints() if c["kind"] == "state"][-1]
    assert state["step"] == last and (Path(state["path"]) / "trainer_state.pt").is_file()

    # A fresh API (its state lives in memory) and env, the same run directory: resume.
    resumed = config.with_ports(api=free_port(), inference=free_port())
    with LocalRun(resumed, tmp_path / "home") as run:
        run.start_all()
        assert run.wait_trainer_exit(600) == 0, run.procs["trainer"].tail()
        status = run.status()
        steps = [m["step"] for m in run.metrics()]
        log = run.log("trainer").read_text()
    # The resumed checkpoint is evaluated before training goes on: its step's line again, with
    # the evaluation added (the later line wins).
    assert steps == steps_before + [last] + list(range(last + 1, 5))
    assert status["phase"] == "done" and status["step"] == 4
    assert status["resume_state"] == [c for c in run.checkpoints() if c["kind"] == "state"][-1]["path"]
    assert f"resuming from {state['path']} (step {last})" in log
    assert f"starting_step={last}" in log
