"""Learning-signal health (issue 34): a run whose groups mostly carry no signal says so, with
advice; one like a default arithmetic run does not."""

from __future__ import annotations

import json
from pathlib import Path

from mcp_rl.metrics.results import local_results
from mcp_rl.metrics.signal import learning_signal
from mcp_rl.rundir import METRICS_FILE
from mcp_rl.settings import Settings
from mcp_rl.supervisor import service
from mcp_rl.supervisor.registry import Registry
from mcp_rl.supervisor.states import RunState
from tests.conftest import make_env
from tests.records import run_record


def rows(no_signal_per_step: list[int], groups: int = 8, group_size: int = 4, reward: float = 0.05) -> list[dict]:
    out = []
    for step, none in enumerate(no_signal_per_step, start=1):
        out.append(
            {
                "step": step,
                "reward/mean": reward,
                "reward/std": 0.1,
                "batch/groups": groups,
                "batch/zero_signal_groups": none,
                "batch/sequences": groups * group_size,
                "batch/trained_sequences": (groups - none) * group_size,
            }
        )
    return out


def test_most_groups_without_signal_for_several_steps_warn_with_advice() -> None:
    signal = learning_signal(rows([7, 6, 7, 7, 6, 7]))
    assert signal is not None and signal.steps == [2, 3, 4, 5, 6]
    assert signal.groups == 40 and signal.no_signal_share == 0.825 and signal.trained_share == 0.175
    assert signal.warning is not None
    assert "33 of 40 groups (82%) gave every answer the same reward" in signal.warning
    assert "only 18% of sampled answers were trained on" in signal.warning
    advice = " ".join(signal.advice)
    assert "too hard" in signal.advice[0]  # rewards near 0
    for hint in ("rl_edit_config('group_size', 8)", "temperature", "easier items", "Partial credit"):
        assert hint in advice


def test_a_run_like_a_default_arithmetic_run_does_not_warn() -> None:
    # 8 groups of 4 per step at ~20-25 % right: about 41 % of groups without signal.
    signal = learning_signal(rows([3, 4, 3, 4, 3], reward=0.22))
    assert signal is not None and signal.no_signal_share == 0.425 and signal.warning is None
    # Too few steps (or groups) to call it: no warning yet either.
    assert learning_signal(rows([8, 8])) is not None
    assert learning_signal(rows([8, 8])).warning is None  # type: ignore[union-attr]
    assert learning_signal(rows([2, 2, 2], groups=2)).warning is None  # type: ignore[union-attr]
    assert learning_signal([{"step": 1, "reward/mean": 0.5}]) is None


def test_rl_check_status_carries_the_warning(tmp_path: Path) -> None:
    settings = Settings.from_env(make_env(tmp_path))
    run_dir = settings.runs_dir / "sig1"
    run_dir.mkdir(parents=True)
    (run_dir / METRICS_FILE).write_text("".join(json.dumps(r) + "\n" for r in rows([8, 7, 8, 8])))
    Registry(settings.state_db).create_run(run_record("sig1", run_dir, state=RunState.COMPLETED))
    status = service.run_status(settings, "sig1", repair=False)
    assert status.learning_signal is not None and status.learning_signal.warning is not None
    assert "Little to learn from" in status.message and "groups" in status.message
    results, _ = local_results(settings, "sig1")
    assert results.learning_signal is not None and results.learning_signal.warning == status.learning_signal.warning


def _held_out(base_step: int, step: int, base: float, trained: float, low: float, high: float, p: float):
    from mcp_rl.evaluation.summary import HeldOutSummary

    return HeldOutSummary(
        n=201,
        base_step=base_step,
        step=step,
        base_score=base,
        trained_score=trained,
        difference=trained - base,
        ci_low=low,
        ci_high=high,
        p_value=p,
        test="McNemar exact",
        sentence="",
    )


def test_a_flat_held_out_score_after_many_steps_says_so_with_its_test_and_interval() -> None:
    from mcp_rl.metrics.signal import with_held_out

    flat = with_held_out(learning_signal(rows([1, 2, 1, 2, 1])), _held_out(0, 30, 0.17, 0.18, -0.03, 0.05, 0.71))
    assert flat is not None and flat.warning is None and flat.held_out_flat is not None
    assert "not moved in 30 steps" in flat.held_out_flat and "201 items" in flat.held_out_flat
    assert "McNemar exact" in flat.held_out_flat and "-0.03 to +0.05" in flat.held_out_flat and flat.advice
    # Learning (p < 0.05), or too early to say (3 steps), or no held-out figures: no such warning.
    learned = with_held_out(learning_signal(rows([1, 2, 1])), _held_out(0, 30, 0.17, 0.5, 0.25, 0.41, 1e-9))
    assert learned is not None and learned.held_out_flat is None and not learned.advice
    early = with_held_out(learning_signal(rows([1, 2, 1])), _held_out(0, 3, 0.17, 0.17, -0.02, 0.02, 1.0))
    assert early is not None and early.held_out_flat is None
    assert with_held_out(None, None) is None
    only_held_out = with_held_out(None, _held_out(0, 20, 0.3, 0.3, -0.04, 0.04, 1.0))
    assert only_held_out is not None and only_held_out.held_out_flat is not None
