"""Learning-signal health (issue 34): a run whose groups mostly carry no signal says so, with
advice; one like a default arithmetic run does not."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mcp_rl.metrics.signal import learning_signal
from mcp_rl.rundir import METRICS_FILE
from mcp_rl.settings import Settings
from mcp_rl.supervisor import service
from mcp_rl.supervisor.registry import Registry
from mcp_rl.supervisor.results import local_results
from mcp_rl.supervisor.states import RunState
from tests.conftest import make_env
from tests.kit.runs import run_record


def rows(
    no_signal_per_step: list[int], groups: int = 8, group_size: int = 4, reward: float | list[float] = 0.05
) -> list[dict]:
    out = []
    for step, none in enumerate(no_signal_per_step, start=1):
        out.append(
            {
                "step": step,
                "reward/mean": reward[step - 1] if isinstance(reward, list) else reward,
                "reward/std": 0.1,
                "batch/groups": groups,
                "batch/zero_signal_groups": none,
                "batch/sequences": groups * group_size,
                "batch/trained_sequences": (groups - none) * group_size,
            }
        )
    return out


# Two default arithmetic runs (the demo at its defaults, 30 steps, 2026-11-26): no-signal groups of
# 8 and mean reward per step. Held-out 0.17 -> 0.33 (McNemar p = 0.0008) and 0.17 -> 0.76.
DEMO_RUN_1 = (
    [7, 5, 6, 6, 6, 3, 7, 5, 8, 4, 6, 6, 8, 7, 7, 6, 7, 6, 8, 8, 8, 8, 8, 7, 6, 6, 6, 8, 7, 8],
    [0.0312, 0.0938, 0.0938, 0.0938, 0.0938, 0.2188, 0.3438, 0.375, 0.25, 0.4688, 0.4688, 0.25, 0.25, 0.0625,
     0.4062, 0.2812, 0.1562, 0.4375, 0.25, 0.25, 0.25, 0.25, 0.375, 0.5312, 0.5, 0.5938, 0.4062, 0.375, 0.1562,
     0.375],
)  # fmt: skip
DEMO_RUN_2 = (
    [8, 6, 4, 7, 6, 5, 7, 5, 7, 7, 7, 7, 6, 7, 5, 6, 6, 6, 7, 2, 7, 7, 4, 4, 4, 5, 5, 4, 4, 3],
    [0.0, 0.0625, 0.1875, 0.0625, 0.3438, 0.2188, 0.3438, 0.3125, 0.0312, 0.4062, 0.4062, 0.3125, 0.5938, 0.3438,
     0.4062, 0.2188, 0.5, 0.5625, 0.6875, 0.4688, 0.6562, 0.8125, 0.5625, 0.6875, 0.5312, 0.5938, 0.4688, 0.6562,
     0.4688, 0.5625],
)  # fmt: skip


def test_most_groups_without_signal_for_several_steps_warn_with_advice() -> None:
    signal = learning_signal(rows([7, 6, 7, 7, 6, 7, 6, 7, 7, 6, 7]))
    assert signal is not None and signal.steps == [7, 8, 9, 10, 11]
    assert signal.groups == 40 and signal.no_signal_share == 0.825 and signal.trained_share == 0.175
    assert signal.warning is not None and signal.reward_rise is None
    assert "33 of 40 groups (82%) gave every answer the same reward" in signal.warning
    assert "only 18% of sampled answers were trained on" in signal.warning
    advice = " ".join(signal.advice)
    assert "too hard" in signal.advice[0]  # rewards near 0
    for hint in ("rl_edit_config('group_size', 8)", "temperature", "easier items", "Partial credit"):
        assert hint in advice


def test_a_default_arithmetic_run_does_not_warn_at_any_step() -> None:
    # 75-90 % of its groups carry no signal in many windows, and it learns: the reward's rise says so.
    for no_signal, rewards in (DEMO_RUN_1, DEMO_RUN_2):
        history = rows(no_signal, reward=rewards)
        for step in range(1, len(history) + 1):
            signal = learning_signal(history[:step][-5:], history[:10])
            assert signal is not None and signal.warning is None, (step, signal)
        final = learning_signal(history)
        assert final is not None and final.reward_rise is not None
        assert "exact permutation test (one-sided) on the 5 + 5 steps' mean rewards" in final.reward_rise
        assert "95 % interval" in final.reward_rise
    final_1 = learning_signal(rows(*DEMO_RUN_1[:1], reward=DEMO_RUN_1[1]))
    assert final_1 is not None and final_1.no_signal_share == 0.875 and "yet it learns" in (final_1.reward_rise or "")


def test_the_same_share_with_a_flat_reward_warns_once_the_windows_are_apart() -> None:
    no_signal = DEMO_RUN_1[0]
    flat = [0.0938, 0.0625, 0.0938, 0.125, 0.0625] * 6
    history = rows(no_signal, reward=flat)
    assert all(learning_signal(history[:s], history[:10]).warning is None for s in range(1, 10))  # type: ignore[union-attr]
    late = learning_signal(history[:30], history[:10])
    assert late is not None and late.warning is not None and late.reward_rise is None
    # A run that trains on nothing at all is called before the windows are apart.
    assert learning_signal(rows([8, 8, 8, 8], reward=0.0)).warning is not None  # type: ignore[union-attr]


def test_a_small_share_or_too_few_steps_do_not_warn() -> None:
    signal = learning_signal(rows([3, 4, 3, 4, 3, 3, 4, 3, 4, 3, 4], reward=0.22))
    assert signal is not None and signal.no_signal_share == 0.45 and signal.warning is None
    assert learning_signal(rows([8, 8])) is not None
    assert learning_signal(rows([8, 8])).warning is None  # type: ignore[union-attr]
    # Two groups a step with some signal: too few groups to call.
    assert learning_signal(rows([2, 1, 2, 2, 1, 2, 2, 2, 1, 2, 2, 2], groups=2)).warning is None  # type: ignore[union-attr]
    assert learning_signal([{"step": 1, "reward/mean": 0.5}]) is None


def test_the_rise_test_matches_a_brute_force_count() -> None:
    from itertools import permutations

    from mcp_rl.proof.stats import bootstrap_difference_interval, permutation_p_greater

    before, after = [0.1, 0.2, 0.1], [0.3, 0.2, 0.4]
    values = before + after
    orders = list(permutations(values))
    brute = sum(1 for o in orders if sum(o[3:]) >= sum(after) - 1e-12) / len(orders)
    # Two of the 20 splits reach 0.9: {0.3, 0.2, 0.4} with either 0.2.
    assert permutation_p_greater(before, after) == pytest.approx(brute) == pytest.approx(2 / 20)
    assert permutation_p_greater([0.0] * 5, [1.0] * 5) == 1 / 252
    assert permutation_p_greater([0.5] * 3, [0.5] * 3) == 1.0
    low, high = bootstrap_difference_interval(before, after)
    assert 0 < low < 0.2 < high <= 0.3
    # Against scipy (hand-written here for the status path's speed: the module's docstrings).
    import numpy as np
    from scipy.stats import bootstrap, permutation_test

    def diff(a: object, b: object, axis: int = -1) -> object:
        return np.mean(a, axis=axis) - np.mean(b, axis=axis)

    for b, a in ((before, after), ([0.1, 0.3, 0.2, 0.2, 0.1], [0.2, 0.4, 0.3, 0.6, 0.2]), ([0.5] * 3, [0.5] * 3)):
        exact = permutation_test(
            (a, b), diff, permutation_type="independent", alternative="greater", n_resamples=np.inf
        )
        assert permutation_p_greater(b, a) == pytest.approx(exact.pvalue)
    b, a = [0.1, 0.3, 0.2, 0.2, 0.1], [0.2, 0.4, 0.3, 0.6, 0.2]
    theirs = bootstrap((a, b), diff, n_resamples=4000, method="percentile", rng=np.random.default_rng(0))
    ours = bootstrap_difference_interval(b, a)
    assert ours == pytest.approx((theirs.confidence_interval.low, theirs.confidence_interval.high), abs=0.03)


def test_rl_check_status_carries_the_warning(tmp_path: Path) -> None:
    settings = Settings.from_env(make_env(tmp_path))
    run_dir = settings.runs_dir / "sig1"
    run_dir.mkdir(parents=True)
    (run_dir / METRICS_FILE).write_text("".join(json.dumps(r) + "\n" for r in rows([8, 7, 8, 8, 7, 8, 8, 8, 7, 8, 8])))
    Registry(settings.state_db).create_run(run_record("sig1", run_dir, state=RunState.COMPLETED))
    status = service.run_status(settings, "sig1", repair=False)
    assert status.learning_signal is not None and status.learning_signal.warning is not None
    assert "Little to learn from" in status.message and "groups" in status.message
    results, _ = local_results(settings, "sig1")
    assert results.learning_signal is not None and results.learning_signal.warning == status.learning_signal.warning


def _held_out(base_step: int, step: int, base: float, trained: float, low: float, high: float, p: float):
    from mcp_rl.proof.summary import HeldOutSummary

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
    # A held-out gain also answers a share warning: it learned from the few groups with signal.
    warned = learning_signal(rows([8, 7, 8, 8, 7, 8, 8, 8, 7, 8, 8]))
    assert warned is not None and warned.warning is not None
    cleared = with_held_out(warned, _held_out(0, 30, 0.17, 0.33, 0.07, 0.25, 0.0008))
    assert cleared is not None and cleared.warning is None and not cleared.advice
    early = with_held_out(learning_signal(rows([1, 2, 1])), _held_out(0, 3, 0.17, 0.17, -0.02, 0.02, 1.0))
    assert early is not None and early.held_out_flat is None
    assert with_held_out(None, None) is None
    only_held_out = with_held_out(None, _held_out(0, 20, 0.3, 0.3, -0.04, 0.04, 1.0))
    assert only_held_out is not None and only_held_out.held_out_flat is not None


def test_a_run_with_no_signal_since_its_first_step_warns_from_its_third_whatever_its_group_count() -> None:
    # Issue 44: a 5-step run of 2 groups a step of a task no answer can win warned nothing.
    assert learning_signal(rows([2, 2], groups=2)).warning is None  # type: ignore[union-attr]
    third = learning_signal(rows([2, 2, 2], groups=2))
    assert third is not None and third.warning is not None and "6 of 6 groups" in third.warning
    assert third.advice and any("group_size" in a for a in third.advice)
    # One group with signal at the start: not "never", and too few groups to call otherwise.
    assert learning_signal(rows([1, 2, 2, 2, 2], groups=2)).warning is None  # type: ignore[union-attr]


def test_dead_groups_warn_whatever_the_reward_when_a_constant_answer_does_as_well() -> None:
    from mcp_rl.metrics.signal import with_held_out
    from mcp_rl.proof.verdict import ConstantBaseline

    # The training reward rises (a trick pays) while most groups carry no signal.
    rising = learning_signal(rows([7, 8, 7, 8, 7, 8, 7, 8, 7, 8, 7], reward=[0.1 * i for i in range(11)]))
    assert rising is not None and rising.warning is None and rising.reward_rise is not None
    held = _held_out(0, 30, 0.30, 0.36, 0.01, 0.10, 0.036)
    held.learned = False
    held.constant_baseline = ConstantBaseline(answer="0", score=0.36, source="the most common answer", candidates=4)
    warned = with_held_out(rising, held)
    assert warned is not None and warned.warning is not None
    assert "nothing learned shown" in warned.warning and '"0"' in warned.warning and "0.36" in warned.warning
    assert any("stricter score()" in a for a in warned.advice)
    # The same figures above the constant: the usual rule (a held-out gain clears the warning).
    held.learned = True
    rising2 = learning_signal(rows([7, 8, 7, 8, 7, 8, 7, 8, 7, 8, 7], reward=[0.1 * i for i in range(11)]))
    assert with_held_out(rising2, held).warning is None  # type: ignore[union-attr]
