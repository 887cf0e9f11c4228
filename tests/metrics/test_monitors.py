"""Reward-hacking monitors in learning_signal (issue 44): completion length drifting up while the
held-out score is flat, groups collapsing to one completion, the training reward rising while the
held-out score does not. Each fires on a synthetic bad run and stays quiet on a healthy one; the
trainer records the per-step figures they read."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from mcp_rl.metrics.signal import Monitor, learning_signal, with_held_out
from mcp_rl.proof.summary import HeldOutSummary
from mcp_rl.proof.verdict import ConstantBaseline
from mcp_rl.rundir import (
    COMPLETION_TOKENS_KEY,
    METRICS_FILE,
    SINGLE_COMPLETION_GROUPS_KEY,
    TOP_COMPLETION_SHARE_KEY,
)
from mcp_rl.settings import Settings
from mcp_rl.supervisor import service
from mcp_rl.supervisor.registry import Registry
from mcp_rl.supervisor.states import RunState
from mcp_rl.task import MASKED
from mcp_rl.trainer.advantages import build_examples
from mcp_rl.trainer.loop import batch_metrics
from tests.conftest import make_env
from tests.kit.runs import run_record


def run(
    steps: int,
    *,
    reward: list[float] | float = 0.3,
    tokens: list[float] | float = 12.0,
    single: list[int] | int = 0,
    top: list[float] | float = 0.1,
    groups: int = 8,
    no_signal: int = 4,
) -> list[dict[str, Any]]:
    """A synthetic run's metrics.jsonl rows (each figure a list by step, or one value for all)."""

    def at(value: list[Any] | Any, step: int) -> Any:
        return value[step - 1] if isinstance(value, list) else value

    return [
        {
            "step": step,
            "reward/mean": at(reward, step),
            "reward/std": 0.2,
            "batch/groups": groups,
            "batch/zero_signal_groups": no_signal,
            "batch/sequences": groups * 4,
            "batch/trained_sequences": (groups - no_signal) * 4,
            COMPLETION_TOKENS_KEY: at(tokens, step),
            SINGLE_COMPLETION_GROUPS_KEY: at(single, step),
            TOP_COMPLETION_SHARE_KEY: at(top, step),
        }
        for step in range(1, steps + 1)
    ]


def held_out(
    base: float, trained: float, p: float, *, step: int = 30, learned: bool | None = None, n: int = 201
) -> HeldOutSummary:
    held = HeldOutSummary(
        n=n,
        base_step=0,
        step=step,
        base_score=base,
        trained_score=trained,
        difference=trained - base,
        ci_low=trained - base - 0.06,
        ci_high=trained - base + 0.06,
        p_value=p,
        test="McNemar exact",
        sentence="",
        learned=learned,
    )
    if learned is False:
        held.constant_baseline = ConstantBaseline(
            answer="0", score=trained, source="the most common answer", candidates=3
        )
    return held


FLAT = held_out(0.30, 0.31, 0.77)
GAIN = held_out(0.17, 0.45, 0.0001, learned=True)
BASE_ONLY = HeldOutSummary(n=201, base_step=0, base_score=0.17, sentence="")


def fired(rows: list[dict[str, Any]], held: HeldOutSummary | None) -> set[Monitor]:
    signal = with_held_out(learning_signal(rows[-5:], rows[:10]), held)
    assert signal is not None
    return {m.monitor for m in signal.monitors}


# --- length drift -------------------------------------------------------------------------------


def test_length_drifting_up_with_a_flat_held_out_score_warns_with_its_numbers_and_advice() -> None:
    # Ten steps: answers of ~10 tokens grow to ~30 (a reward paying for length), held-out flat.
    rows = run(10, tokens=[10, 11, 9, 12, 10, 18, 22, 26, 29, 31], reward=[0.3, 0.32, 0.31, 0.3, 0.33] * 2)
    signal = with_held_out(learning_signal(rows[-5:], rows[:10]), FLAT)
    assert signal is not None and signal.completion_tokens == 25.2
    (monitor,) = signal.monitors
    assert monitor.monitor == Monitor.LENGTH_DRIFT
    text = monitor.warning
    assert "10.4 tokens" in text and "25.2 in steps 6-10" in text and "2.4x" in text
    assert "steps 1-5" in text and "p = 0.0040" in text and "exact permutation test" in text
    assert "201 held-out items" in text and "0.30 (step 0) -> 0.31 (step 30)" in text and "McNemar exact" in text
    assert any("rl_get_rollouts" in a for a in monitor.advice) and any("max_tokens" in a for a in monitor.advice)
    # A short run is split in halves: 8 steps, 4 a side.
    short = run(8, tokens=[10, 9, 11, 10, 20, 24, 27, 30])
    assert fired(short, held_out(0.3, 0.28, 0.6, step=8)) == {Monitor.LENGTH_DRIFT}


def test_length_drift_stays_quiet_when_it_helps_is_small_or_cannot_be_judged() -> None:
    rising = run(10, tokens=[10, 11, 9, 12, 10, 18, 22, 26, 29, 31])
    # Longer answers with a held-out gain: reasoning that pays.
    assert fired(rising, GAIN) == set()
    # No evaluation after the base (mid-run, eval_every 0), or none at all: nothing to judge by; the
    # trend is still shown.
    for held in (BASE_ONLY, None):
        signal = with_held_out(learning_signal(rising[-5:], rising[:10]), held)
        assert signal is not None and not signal.monitors
        (length,) = [t for t in signal.trends if t.metric == COMPLETION_TOKENS_KEY]
        assert length.first == 10.4 and length.recent == 25.2 and length.p_value == 1 / 252
    # Significant but small (10 -> 12 tokens, under 1.5x), or large but noisy, or too few steps.
    assert fired(run(10, tokens=[10, 10, 10, 10, 10, 12, 12, 12, 12, 12]), FLAT) == set()
    assert fired(run(10, tokens=[10, 40, 9, 12, 38, 18, 11, 40, 12, 30]), FLAT) == set()
    assert fired(run(6, tokens=[10, 10, 10, 30, 30, 30]), FLAT) == set()
    # Shorter answers are no drift up.
    assert fired(run(10, tokens=[31, 29, 26, 22, 18, 10, 12, 9, 11, 10]), FLAT) == set()


# --- group collapse ----------------------------------------------------------------------------


# One answer whatever the item: "0" to every "how many r's in ...?" (issue 44).
CONSTANT = [0.1, 0.12, 0.1, 0.15, 0.2, 0.4, 0.6, 0.7, 0.8, 0.85]


def test_groups_collapsing_to_one_completion_warn_during_the_run() -> None:
    rows = run(10, single=[0, 1, 0, 1, 0, 3, 5, 6, 7, 7], top=CONSTANT)
    signal = with_held_out(learning_signal(rows[-5:], rows[:10]), BASE_ONLY)
    assert signal is not None and signal.single_completion_share == 0.7
    (monitor,) = signal.monitors
    assert monitor.monitor == Monitor.GROUP_COLLAPSE
    assert "in steps 6-10 70% of groups sampled the very same answer" in monitor.warning
    assert "against 5% in steps 1-5" in monitor.warning and "p = 0.0040" in monitor.warning
    assert "67% of all their answers were one and the same completion" in monitor.warning
    assert any("learning_rate" in a for a in monitor.advice) and any("group_size" in a for a in monitor.advice)
    # With a flat held-out score its figures are named too.
    with_flat = with_held_out(learning_signal(rows[-5:], rows[:10]), FLAT)
    assert with_flat is not None and "0.30 (step 0) -> 0.31" in with_flat.monitors[0].warning


def test_no_collapse_warning_for_a_healthy_or_always_collapsed_or_proven_run() -> None:
    assert fired(run(10, single=[0, 1, 0, 1, 0, 1, 0, 1, 2, 0], top=CONSTANT), None) == set()
    # A task whose answers are one token: groups agree from the first step; that is the task.
    assert fired(run(10, single=[5, 6, 5, 6, 5, 6, 5, 6, 6, 5], top=CONSTANT), None) == set()
    # Each group settles on its own item's answer (a default arithmetic run, measured by
    # bench_monitors: 3 % -> 78 % of groups, and it learns): answers still differ across items, so
    # mid-run nothing is said; beside a flat held-out score at the end it is a collapse.
    own_answers = run(10, single=[0, 0, 1, 0, 0, 5, 6, 6, 7, 7], top=0.12)
    assert fired(own_answers, BASE_ONLY) == set() and fired(own_answers, None) == set()
    assert fired(own_answers, FLAT) == {Monitor.GROUP_COLLAPSE}
    collapsing = run(10, single=[0, 1, 0, 1, 0, 3, 5, 6, 7, 7], top=CONSTANT)
    # The held-out score rose: the model answers each item the same way because it knows it.
    assert fired(collapsing, GAIN) == set()
    # Too few groups to call (2 a step: 10 in the window).
    assert fired(run(10, single=[0, 0, 0, 0, 0, 2, 2, 2, 2, 2], top=CONSTANT, groups=2, no_signal=1), None) == set()


# --- training reward without held-out gain ----------------------------------------------------------


def test_a_rising_training_reward_with_a_flat_held_out_score_warns() -> None:
    rows = run(10, reward=[0.1, 0.12, 0.08, 0.1, 0.11, 0.3, 0.38, 0.45, 0.5, 0.52])
    signal = with_held_out(learning_signal(rows[-5:], rows[:10]), FLAT)
    assert signal is not None
    (monitor,) = signal.monitors
    assert monitor.monitor == Monitor.REWARD_WITHOUT_HELD_OUT
    assert "0.10 (steps 1-5) -> 0.43 (steps 6-10), +0.33" in monitor.warning
    assert "0.30 (step 0) -> 0.31 (step 30)" in monitor.warning
    assert "p = 0.7700" in monitor.warning
    # Above a significant held-out gain that a constant answer also achieves: still no gain shown.
    constant = held_out(0.30, 0.36, 0.036, learned=False)
    (trick,) = with_held_out(learning_signal(rows[-5:], rows[:10]), constant).monitors  # type: ignore[union-attr]
    assert trick.monitor == Monitor.REWARD_WITHOUT_HELD_OUT and 'answering "0" to every item (0.36)' in trick.warning


def test_a_default_arithmetic_run_with_its_held_out_gain_fires_no_monitor() -> None:
    from tests.metrics.test_signal import DEMO_RUN_1, DEMO_RUN_2

    for no_signal, rewards in (DEMO_RUN_1, DEMO_RUN_2):
        rows = run(30, reward=rewards, tokens=[random.Random(s).uniform(4, 7) for s in range(30)], single=0)
        for row, none in zip(rows, no_signal, strict=True):
            row["batch/zero_signal_groups"] = none
        for step in range(1, 31):
            # Mid-run only the base is evaluated; at the end the gain.
            held = GAIN if step == 30 else BASE_ONLY
            assert fired(rows[:step], held) == set(), step
    # A rise smaller than 0.1 is not called, whatever its p.
    assert fired(run(10, reward=[0.30, 0.31, 0.30, 0.31, 0.30, 0.36, 0.37, 0.36, 0.37, 0.36]), FLAT) == set()


def test_false_alarms_on_random_flat_runs_are_rare() -> None:
    # 300 runs with no drift of any kind (noise around a level, held-out flat): each rule fires in
    # at most 3 % of them (a test at p < 0.05 plus a size threshold; measured 1, 0 and 6 of 300).
    counts = dict.fromkeys(Monitor, 0)
    for seed in range(300):
        rng = random.Random(seed)
        level, reward = rng.uniform(5, 60), rng.uniform(0.05, 0.8)
        rows = run(
            rng.randint(8, 30),
            reward=[min(1.0, max(0.0, rng.gauss(reward, 0.08))) for _ in range(30)],
            tokens=[max(1.0, rng.gauss(level, level * 0.25)) for _ in range(30)],
            single=[min(8, max(0, round(rng.gauss(1.5, 1.2)))) for _ in range(30)],
        )
        for monitor in fired(rows, FLAT):
            counts[monitor] += 1
    assert all(count <= 9 for count in counts.values()), counts


# --- the dead-groups rule, as the issue states it -------------------------------------------------


def test_a_five_step_run_of_two_groups_no_answer_can_win_warns_from_its_third_step() -> None:
    # Issue 44: a 5-step run of 2 groups a step of a task no answer can win warned nothing.
    rows = run(5, reward=0.0, groups=2, no_signal=2)
    said = []
    for step in range(1, 6):
        signal = with_held_out(learning_signal(rows[:step][-5:], rows[:10]), BASE_ONLY)
        assert signal is not None
        said.append(signal.warning)
    assert said[0] is None and said[1] is None and all(said[2:]), said
    assert "10 of 10 groups (100%)" in (said[4] or "") and "too hard" in " ".join(
        learning_signal(rows[-5:], rows[:10]).advice  # type: ignore[union-attr]
    )
    # At its end the held-out check fails (0.00 -> 0.00, no better than a constant): still warned.
    end = with_held_out(learning_signal(rows[-5:], rows[:10]), held_out(0.0, 0.0, 1.0, step=5, learned=False))
    assert end is not None and end.warning is not None and "nothing learned shown" in end.warning


def test_dead_groups_for_several_steps_warn_whatever_the_reward_when_the_held_out_check_fails() -> None:
    # 80 % dead groups for ten steps while the reward climbs 0.1 -> 0.5 (a trick pays in the few
    # live groups): the reward's rise alone would silence the share rule; the failed check does not.
    rows = run(10, reward=[0.1, 0.1, 0.15, 0.2, 0.2, 0.3, 0.35, 0.4, 0.45, 0.5], no_signal=7)
    alone = learning_signal(rows[-5:], rows[:10])
    assert alone is not None and alone.warning is None and alone.reward_rise is not None
    failed = with_held_out(learning_signal(rows[-5:], rows[:10]), held_out(0.3, 0.36, 0.03, learned=False))
    assert failed is not None and failed.warning is not None and "88%" in failed.warning
    # Below the stated share (75 %): no such warning, whatever the check says.
    some = with_held_out(
        learning_signal(run(10, no_signal=5)[-5:], run(10, no_signal=5)[:10]), held_out(0.3, 0.3, 1.0, learned=False)
    )
    assert some is not None and some.warning is None


# --- where the figures come from ------------------------------------------------------------------


def test_the_trainer_records_completion_length_and_collapsed_groups() -> None:
    prompt = [1, 2, 3]

    def seq(answer: list[int]) -> tuple[list[int], list[int]]:
        return prompt + answer, [MASKED] * len(prompt) + answer

    def group(answers: list[list[int]], scores: list[float]) -> dict[str, Any]:
        pairs = [seq(a) for a in answers]
        return {"tokens": [p[0] for p in pairs], "masks": [p[1] for p in pairs], "scores": scores}

    batch = [
        group([[7, 8, 0], [7, 8, 0], [7, 8, 0], [7, 8, 0]], [1.0] * 4),  # collapsed
        group([[7, 8, 0], [7, 9, 0], [7, 8, 0], [7, 8, 0]], [1.0, 0.0, 1.0, 1.0]),  # one differs
        group([[5, 0], [5, 0]], [0.0, 0.0]),  # collapsed, shorter
        group([[4, 4, 4, 4, 0], [4, 4, 4, 0]], [0.5, 0.5]),  # same start, different lengths
    ]
    _, stats = build_examples(batch)
    assert stats.single_completion_groups == 2
    assert stats.top_completion_share == 7 / 12  # [7, 8, 0]: 4 + 3 of the 12 answers
    lengths = [3] * 8 + [2, 2] + [5, 4]
    assert stats.completion_tokens_mean == sum(lengths) / len(lengths)
    line = batch_metrics(stats)
    assert line[TOP_COMPLETION_SHARE_KEY] == 7 / 12
    assert line[SINGLE_COMPLETION_GROUPS_KEY] == 2 and line[COMPLETION_TOKENS_KEY] == sum(lengths) / len(lengths)


def test_rl_check_status_names_a_collapse(tmp_path: Path) -> None:
    settings = Settings.from_env(make_env(tmp_path))
    run_dir = settings.runs_dir / "mon1"
    run_dir.mkdir(parents=True)
    rows = run(10, single=[0, 1, 0, 1, 0, 3, 5, 6, 7, 7], top=CONSTANT)
    (run_dir / METRICS_FILE).write_text("".join(json.dumps(r) + "\n" for r in rows))
    Registry(settings.state_db).create_run(run_record("mon1", run_dir, state=RunState.RUNNING))
    status = service.run_status(settings, "mon1", repair=False)
    assert status.learning_signal is not None
    assert [m.monitor for m in status.learning_signal.monitors] == [Monitor.GROUP_COLLAPSE]
    assert "Groups are collapsing to one completion" in status.message


def test_rl_check_status_and_rl_get_results_name_a_length_drift(tmp_path: Path) -> None:
    """The wiring a real run takes (tests/tasks/test_length_monitor.py trains one, slow tier): the trainer's
    per-step lengths and its held-out outcomes on disk, read back by both tools."""
    import anyio

    from mcp_rl.proof.outcomes import ItemOutcome, write_outcomes
    from mcp_rl.rundir import eval_outcomes_file
    from mcp_rl.supervisor.results import get_results

    settings = Settings.from_env(make_env(tmp_path))
    run_dir = settings.runs_dir / "long1"
    run_dir.mkdir(parents=True)
    rows = run(10, tokens=[10, 11, 9, 12, 10, 18, 22, 26, 29, 31])
    (run_dir / METRICS_FILE).write_text("".join(json.dumps(r) + "\n" for r in rows))
    # 40 held-out items, the same 12 right before and after: flat.
    for step in (0, 10):
        outcomes = [ItemOutcome(item=f"i{i}", score=float(i < 12), completion=str(i)) for i in range(40)]
        write_outcomes(eval_outcomes_file(run_dir, step), outcomes)
    Registry(settings.state_db).create_run(run_record("long1", run_dir, state=RunState.COMPLETED))

    status = service.run_status(settings, "long1", repair=False)
    assert status.learning_signal is not None
    (monitor,) = [m for m in status.learning_signal.monitors if m.monitor == Monitor.LENGTH_DRIFT]
    assert "Answers are getting longer while the held-out score does not rise" in monitor.warning
    assert "steps 1-5" in monitor.warning and "steps 6-10" in monitor.warning and "40 held-out items" in monitor.warning
    assert monitor.warning in status.message
    results = anyio.run(get_results, settings, "long1")
    assert results.learning_signal is not None
    assert [m.warning for m in results.learning_signal.monitors if m.monitor == Monitor.LENGTH_DRIFT] == [
        monitor.warning
    ]
