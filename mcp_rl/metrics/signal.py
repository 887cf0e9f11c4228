"""Is the run learning anything? Learning-signal health from metrics.jsonl (issue 34).

GRPO learns only from groups whose answers got different rewards: a group scored all 0 (or all
1) has zero advantage everywhere and its answers are skipped. A run where most groups are like
that trains on a fraction of what it samples and its loss sits near 0; the raw metric
`batch/zero_signal_groups` says so only to someone who knows to look. This module turns the
recent steps into three shares and, when most groups carry no signal for several steps and the
reward is not rising, a warning with advice an agent can act on (rl_edit_config calls).

Why the rise matters: a default arithmetic run (SmolLM2-135M, groups of 4) has 75-90 % of its
groups without signal in many 5-step windows (items of mixed difficulty: most are never or
always right) and still learns: its held-out score goes 0.17 -> 0.33 .. 0.76 in 30 steps. A
share alone would warn on a run that works. So a warning needs the first and the latest steps
apart (two windows that do not overlap) and no significant rise of the reward between them.

Reward-hacking monitors (issue 44), each comparing the run's first steps with its latest (up to 5
steps a side, at least 4: the windows split a short run in two) with an exact one-sided
permutation test on the per-step figures (p < 0.05), each a `monitors` entry naming its evidence
with numbers and advice:

- **length drift**: the mean completion length (tokens, `batch/completion_tokens`) grew by half
  or more (and by 4+ tokens) while the held-out score did not rise (a later evaluation than the
  base exists, and its paired test shows no gain at p < 0.05, or the model is not above the best
  constant answer). A reward that pays for length is the usual cause.
- **group collapse**: half or more of the latest groups (12+ groups) sampled one and the same
  completion for every answer (`batch/single_completion_groups`), up by 25 points or more from the
  first steps, and either half or more of those steps' answers are one completion whatever the item
  (`batch/top_completion_share`) or the held-out score did not rise. Groups that each settle on
  their own item's answer are a model that learned short answers (a default arithmetic run: 3 % ->
  78 % of its groups, and it learns), not a collapse.
- **reward without held-out gain**: the training reward rose by 0.1 or more while the held-out
  score did not rise (as above): the reward pays for something the held-out check does not.

Without a held-out evaluation after the base (mid-run with eval_every 0) the length and reward
rules cannot judge and stay silent; `trends` still shows the figures. Their false-alarm rates on default runs of the bundled
tasks are measured by bench/bench_monitors.py.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, Field

from mcp_rl.proof.stats import (
    PERMUTATION_TEST,
    UNPAIRED_BOOTSTRAP_CI,
    bootstrap_difference_interval,
    format_p,
    permutation_p_greater,
)
from mcp_rl.proof.summary import HeldOutSummary
from mcp_rl.rundir import (
    COMPLETION_TOKENS_KEY,
    REWARD_KEY,
    SINGLE_COMPLETION_GROUPS_KEY,
    STEP_KEY,
    TOP_COMPLETION_SHARE_KEY,
)

GROUPS_KEY = "batch/groups"
NO_SIGNAL_KEY = "batch/zero_signal_groups"
SEQUENCES_KEY = "batch/sequences"
TRAINED_SEQUENCES_KEY = "batch/trained_sequences"
REWARD_STD_KEY = "reward/std"

# The recent steps looked at, and how many of them (and of their groups) a warning needs.
WINDOW_STEPS = 5
MIN_STEPS = 3
MIN_GROUPS = 12
# "Most groups": three in four.
WARN_SHARE = 0.75
# The reward rose when the latest window's per-step mean rewards beat the first window's at this
# level (exact one-sided permutation test; with 5 + 5 steps the smallest p is 1/252).
RISE_P = 0.05
# Five steps a side is little: a rise this large, significant or not yet, is not "flat" either (a
# default run's second window is often ~0.13 above its first at p ~ 0.1, and it goes on to learn).
FLAT_RISE = 0.05
# A held-out score is called flat only after this many steps of training since the base's
# evaluation, and only when its paired test finds no difference (p >= FLAT_P, interval across 0).
FLAT_MIN_STEPS = 10
FLAT_P = 0.05

# The monitors' windows: the first and the latest steps, WINDOW_STEPS a side, or half the steps
# of a shorter run; at least MONITOR_MIN_STEPS a side (with 4 + 4 steps the smallest p is 1/70).
MONITOR_MIN_STEPS = 4
MONITOR_P = 0.05
# Length drift: the latest mean completion length at least LENGTH_RATIO times the first's and
# LENGTH_MIN_TOKENS more.
LENGTH_RATIO = 1.5
LENGTH_MIN_TOKENS = 4.0
# Group collapse: at least this share of the latest groups had one distinct completion, this
# many points above the first steps' share, over at least MIN_GROUPS groups.
COLLAPSE_SHARE = 0.5
COLLAPSE_RISE = 0.25
# ... and the latest steps' most common completion at least this share of their answers (or the
# held-out score did not rise).
COLLAPSE_TOP_SHARE = 0.5
# Reward without held-out gain: the training reward rose at least this much.
REWARD_MIN_RISE = 0.1
SINGLE_SHARE = "batch/single_completion_share"


class Monitor(StrEnum):
    LENGTH_DRIFT = "length_drift"
    """Completions grew longer while the held-out score did not rise."""
    GROUP_COLLAPSE = "group_collapse"
    """Most groups sampled one completion for every answer."""
    REWARD_WITHOUT_HELD_OUT = "reward_without_held_out"
    """The training reward rose while the held-out score did not."""


class MonitorWarning(BaseModel):
    """One reward-hacking monitor that fired: its evidence with numbers, and what to do."""

    monitor: Monitor
    warning: str
    advice: list[str] = Field(default_factory=list)


class Trend(BaseModel):
    """A per-step figure over the run's first steps against its latest (windows apart)."""

    metric: str = Field(
        description="batch/completion_tokens (mean tokens per answer), batch/single_completion_share (groups whose "
        "answers were all the same completion), batch/top_completion_share (answers that were the step's most common "
        "completion), or reward/mean."
    )
    first_steps: list[int]
    recent_steps: list[int]
    first: float = Field(description="Mean of the per-step values over first_steps.")
    recent: float = Field(description="Mean of the per-step values over recent_steps.")
    p_value: float = Field(description="Exact one-sided permutation test that the recent steps' values are higher.")


class LearningSignal(BaseModel):
    """The last few steps' learning signal, and what to do when there is little."""

    steps: list[int] = Field(description="The steps these figures cover (the latest few).")
    groups: int
    no_signal_share: float = Field(description="Share of groups whose answers all got the same reward (no signal).")
    trained_share: float | None = Field(
        None, description="Share of sampled answers trained on (answers of no-signal groups are skipped)."
    )
    reward_spread: float | None = Field(None, description="Mean standard deviation of rewards within a step's batch.")
    reward_mean: float | None = None
    reward_rise: str | None = Field(
        None,
        description="Set when the reward rose from the first steps to the latest (its test, n and interval stated): "
        "the run is learning, whatever the share of groups without signal.",
    )
    warning: str | None = Field(
        None, description="Set when most groups carried no signal for several steps and the reward is not rising."
    )
    held_out_flat: str | None = Field(
        None,
        description=f"Set when the held-out score has not moved after {FLAT_MIN_STEPS}+ steps (its paired test, n and "
        "interval stated).",
    )
    advice: list[str] = Field(default_factory=list, description="What to change, as calls to make.")
    completion_tokens: float | None = Field(None, description="Mean completion length in tokens over these steps.")
    single_completion_share: float | None = Field(
        None, description="Share of groups whose answers were all one and the same completion (collapsed)."
    )
    trends: list[Trend] = Field(
        default_factory=list,
        description="Completion length, collapsed groups and reward: the first steps against the latest (4+ steps "
        "a side), what the monitors read.",
    )
    monitors: list[MonitorWarning] = Field(
        default_factory=list,
        description="Reward-hacking monitors that fired (length drifting up, groups collapsing to one completion, "
        "training reward rising without the held-out score), each with its evidence and advice. Tell the person.",
    )


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _step_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in rows if _number(r.get(GROUPS_KEY)) and _number(r.get(NO_SIGNAL_KEY)) is not None]


def learning_signal(
    rows: list[dict[str, Any]], first_rows: list[dict[str, Any]] | None = None
) -> LearningSignal | None:
    """The signal of the latest steps of `rows` (metrics.jsonl lines), judged against the run's
    first steps (`first_rows`, the head of the file; default: `rows` itself); None before any
    step recorded its groups."""
    steps = _step_rows(rows)
    recent = steps[-WINDOW_STEPS:]
    first = _step_rows(first_rows if first_rows is not None else rows)[:WINDOW_STEPS]
    if not recent:
        return None
    groups = sum(int(_number(r[GROUPS_KEY]) or 0) for r in recent)
    no_signal = sum(int(_number(r[NO_SIGNAL_KEY]) or 0) for r in recent)
    sequences = sum(_number(r.get(SEQUENCES_KEY)) or 0 for r in recent)
    trained = [_number(r.get(TRAINED_SEQUENCES_KEY)) for r in recent]
    spreads = [s for s in (_number(r.get(REWARD_STD_KEY)) for r in recent) if s is not None]
    rewards = [m for m in (_number(r.get(REWARD_KEY)) for r in recent) if m is not None]
    share = no_signal / groups
    signal = LearningSignal(
        steps=[int(r.get(STEP_KEY, 0)) for r in recent],
        groups=groups,
        no_signal_share=round(share, 3),
        trained_share=round(sum(t or 0 for t in trained) / sequences, 3)
        if sequences and all(t is not None for t in trained)
        else None,
        reward_spread=round(sum(spreads) / len(spreads), 4) if spreads else None,
        reward_mean=round(sum(rewards) / len(rewards), 4) if rewards else None,
    )
    lengths = [_number(r.get(COMPLETION_TOKENS_KEY)) for r in recent]
    if all(v is not None for v in lengths):
        signal.completion_tokens = round(sum(v or 0 for v in lengths) / len(lengths), 2)
    singles = [_number(r.get(SINGLE_COMPLETION_GROUPS_KEY)) for r in recent]
    if all(v is not None for v in singles):
        signal.single_completion_share = round(sum(v or 0 for v in singles) / groups, 3)
    signal.trends = _trends(_step_rows(first_rows if first_rows is not None else rows), steps)
    apart = bool(first) and int(first[-1].get(STEP_KEY, 0)) < signal.steps[0]
    rise = _mean_reward(recent) - _mean_reward(first) if apart and first else None
    if apart and len(first) >= MIN_STEPS and len(recent) >= MIN_STEPS:
        signal.reward_rise = _reward_rise(first, recent)
    # A run that has had no signal at all since its first step warns from its MIN_STEPS-th step,
    # however few groups a step samples (5 steps of 2 groups that no answer can win said nothing).
    head = _step_rows(first_rows if first_rows is not None else rows)
    never = bool(head) and all(_no_signal_at_all(r) for r in [*head, *steps])
    if len(recent) >= MIN_STEPS and (groups >= MIN_GROUPS or never) and share >= WARN_SHARE:
        # Before the windows are apart only a run that trains on nothing at all is called.
        flat = rise is not None and rise < FLAT_RISE
        if signal.reward_rise is None and (flat or no_signal == groups):
            signal.warning, signal.advice = _warning(signal, no_signal)
        elif signal.reward_rise is not None:
            signal.reward_rise += f" Most recent groups ({share:.0%}) carry no signal, yet it learns."
    return signal


def _no_signal_at_all(row: dict[str, Any]) -> bool:
    return (_number(row.get(NO_SIGNAL_KEY)) or 0) >= (_number(row.get(GROUPS_KEY)) or 0) > 0


def _single_share(row: dict[str, Any]) -> float | None:
    single, groups = _number(row.get(SINGLE_COMPLETION_GROUPS_KEY)), _number(row.get(GROUPS_KEY))
    return single / groups if single is not None and groups else None


def _trends(head: list[dict[str, Any]], tail: list[dict[str, Any]]) -> list[Trend]:
    """The monitored figures, first steps against latest: the steps known (the file's head and
    tail, one row a step) split into WINDOW_STEPS a side, or halves of a shorter run."""
    by_step = {int(_number(r.get(STEP_KEY)) or 0): r for r in [*head, *tail]}
    ordered = [by_step[s] for s in sorted(by_step)]
    k = min(WINDOW_STEPS, len(ordered) // 2)
    if k < MONITOR_MIN_STEPS:
        return []
    first, recent = ordered[:k], ordered[-k:]
    out = []
    for metric, value in (
        (COMPLETION_TOKENS_KEY, lambda r: _number(r.get(COMPLETION_TOKENS_KEY))),
        (SINGLE_SHARE, _single_share),
        (TOP_COMPLETION_SHARE_KEY, lambda r: _number(r.get(TOP_COMPLETION_SHARE_KEY))),
        (REWARD_KEY, lambda r: _number(r.get(REWARD_KEY))),
    ):
        before, after = [value(r) for r in first], [value(r) for r in recent]
        if any(v is None for v in [*before, *after]):
            continue  # a run from before the figure was recorded
        if metric == SINGLE_SHARE and sum(_number(r.get(GROUPS_KEY)) or 0 for r in recent) < MIN_GROUPS:
            continue  # too few groups to call a collapse
        b, a = [float(v or 0) for v in before], [float(v or 0) for v in after]
        out.append(
            Trend(
                metric=metric,
                first_steps=[int(r.get(STEP_KEY, 0)) for r in first],
                recent_steps=[int(r.get(STEP_KEY, 0)) for r in recent],
                first=round(sum(b) / k, 4),
                recent=round(sum(a) / k, 4),
                p_value=permutation_p_greater(b, a),
            )
        )
    return out


def _mean_reward(rows: list[dict[str, Any]]) -> float:
    rewards = [m for m in (_number(r.get(REWARD_KEY)) for r in rows) if m is not None]
    return sum(rewards) / len(rewards) if rewards else 0.0


def _reward_rise(first: list[dict[str, Any]], recent: list[dict[str, Any]]) -> str | None:
    """A sentence when the recent steps' mean rewards are significantly above the first steps'."""
    before = [m for m in (_number(r.get(REWARD_KEY)) for r in first) if m is not None]
    after = [m for m in (_number(r.get(REWARD_KEY)) for r in recent) if m is not None]
    if len(before) < MIN_STEPS or len(after) < MIN_STEPS:
        return None
    p = permutation_p_greater(before, after)
    mean_before, mean_after = sum(before) / len(before), sum(after) / len(after)
    if p >= RISE_P or mean_after <= mean_before:
        return None
    low, high = bootstrap_difference_interval(before, after)
    return (
        f"The reward rose from {mean_before:.2f} (steps {first[0].get(STEP_KEY)}-{first[-1].get(STEP_KEY)}) to "
        f"{mean_after:.2f} (steps {recent[0].get(STEP_KEY)}-{recent[-1].get(STEP_KEY)}): "
        f"{mean_after - mean_before:+.2f}, 95 % interval {low:+.2f} to {high:+.2f} ({UNPAIRED_BOOTSTRAP_CI}); "
        f"{PERMUTATION_TEST} on the {len(before)} + {len(after)} steps' mean rewards, {format_p(p)}."
    )


def _warning(signal: LearningSignal, no_signal: int) -> tuple[str, list[str]]:
    first, last = signal.steps[0], signal.steps[-1]
    warning = (
        f"Little to learn from: in steps {first}-{last}, {no_signal} of {signal.groups} groups "
        f"({signal.no_signal_share:.0%}) gave every answer the same reward, so they carry no learning signal"
        + (f" and only {signal.trained_share:.0%} of sampled answers were trained on" if signal.trained_share else "")
        + ". The loss stays near 0 and rewards will hardly move."
    )
    advice = [
        "More answers per item make different rewards likelier: rl_edit_config('group_size', 8) (or 16).",
        "More varied answers: rl_edit_config('temperature', 1.2) if the environment has a temperature field.",
    ]
    mean = signal.reward_mean
    if mean is not None and mean <= 0.1:
        advice.insert(
            0,
            "Rewards are almost all 0: the items are too hard for this model; use easier items "
            "(e.g. a smaller range or difficulty field) or a larger base model.",
        )
    elif mean is not None and mean >= 0.9:
        advice.insert(0, "Rewards are almost all 1: the items are too easy to learn from; use harder items.")
    advice.append(
        "Partial credit (a reward between 0 and 1 for a nearly right answer) turns all-0 groups into signal: "
        "change the environment's score()."
    )
    return warning, advice


def with_held_out(signal: LearningSignal | None, held_out: HeldOutSummary | None) -> LearningSignal | None:
    """`signal` read beside the run's held-out figures: `held_out_flat` when the held-out score
    has not moved, the dead-groups warning when a constant answer does as well, and the
    reward-hacking `monitors`."""
    signal = _held_out_rules(signal, held_out)
    if signal is not None:
        signal.monitors = monitors(signal.trends, held_out)
    return signal


def _held_out_rules(signal: LearningSignal | None, held_out: HeldOutSummary | None) -> LearningSignal | None:
    """`signal` with `held_out_flat` set when the run's held-out score has not moved: at least
    FLAT_MIN_STEPS steps after the base's evaluation, the paired comparison finds no difference."""
    if held_out is None or held_out.step is None or held_out.p_value is None or held_out.difference is None:
        return signal
    if (
        signal is not None
        and held_out.learned is False
        and len(signal.steps) >= MIN_STEPS
        and signal.no_signal_share >= WARN_SHARE
    ):
        # Dead groups, and the held-out figures do not beat a constant answer: warn whatever the
        # training reward does (a reward rising on a trick is not learning).
        baseline = held_out.constant_baseline
        signal.warning = (
            f"Little to learn from, and nothing learned shown: in steps {signal.steps[0]}-{signal.steps[-1]} "
            f"{signal.no_signal_share:.0%} of groups gave every answer the same reward, and on {held_out.n} held-out "
            f"items the trained model ({held_out.trained_score:.2f}) does no better than answering "
            f'"{baseline.answer if baseline else "?"}" to every item ({baseline.score if baseline else 0:.2f}).'
        )
        signal.advice = [
            "More answers per item make different rewards likelier: rl_edit_config('group_size', 8) (or 16).",
            "A lower sampling temperature if the answers wander, a stricter score() (full credit only for the "
            "exact answer) if a trick pays, easier items, or more steps.",
        ]
        return signal
    if signal is not None and signal.warning and held_out.p_value < FLAT_P and held_out.difference > 0:
        # The held-out items say it learned: few groups with signal were enough.
        signal.warning, signal.advice = None, []
        return signal
    trained_for = held_out.step - held_out.base_step
    low, high = held_out.ci_low, held_out.ci_high
    if trained_for < FLAT_MIN_STEPS or held_out.p_value < FLAT_P or low is None or high is None or not low <= 0 <= high:
        return signal
    if signal is None:
        signal = LearningSignal(steps=[held_out.step], groups=0, no_signal_share=0.0)
    signal.held_out_flat = (
        f"The held-out score has not moved in {trained_for} steps: {held_out.base_score:.2f} at step "
        f"{held_out.base_step}, {held_out.trained_score:.2f} at step {held_out.step} on {held_out.n} items "
        f"(difference {held_out.difference:+.2f}, 95 % interval {low:+.2f} to {high:+.2f}, {held_out.test}, "
        f"p = {held_out.p_value:.2g}). More of the same steps will hardly change it."
    )
    if not signal.advice:
        signal.advice = [
            "A larger learning rate moves the model faster (rl_edit_config('learning_rate', ...), e.g. twice it).",
            "More answers per item give more signal: rl_edit_config('group_size', 8) (or 16).",
            "Items the model gets right a quarter to three quarters of the time teach the most: adjust the "
            "environment's difficulty fields, or give partial credit in its score().",
        ]
    return signal


def _held_out_verdict(held_out: HeldOutSummary | None) -> tuple[bool, str] | None:
    """(whether the held-out score rose, the figures in words); None without an evaluation after
    the base's. Rose: the paired test finds a gain at p < FLAT_P and the model is not shown to do no
    better than a constant answer."""
    if (
        held_out is None
        or held_out.step is None
        or held_out.step <= held_out.base_step
        or held_out.trained_score is None
        or held_out.difference is None
        or held_out.p_value is None
    ):
        return None
    rose = held_out.p_value < FLAT_P and held_out.difference > 0 and held_out.learned is not False
    items = f"{held_out.n} held-out items" if held_out.n else "the held-out items"
    words = (
        f"on {items} the score went {held_out.base_score:.2f} (step {held_out.base_step}) -> "
        f"{held_out.trained_score:.2f} (step {held_out.step}), {held_out.difference:+.2f}"
        + (
            f", 95 % interval {held_out.ci_low:+.2f} to {held_out.ci_high:+.2f}"
            if held_out.ci_low is not None and held_out.ci_high is not None
            else ""
        )
        + f" ({held_out.test or 'paired test'}, {format_p(held_out.p_value)})"
    )
    baseline = held_out.constant_baseline
    if held_out.learned is False and baseline is not None:
        words += f', no better than answering "{baseline.answer}" to every item ({baseline.score:.2f})'
    return rose, words


def _steps(steps: list[int]) -> str:
    return f"{steps[0]}-{steps[-1]}" if steps else "?"


def _test(trend: Trend) -> str:
    n = len(trend.first_steps)
    return f"{PERMUTATION_TEST} on the {n} + {len(trend.recent_steps)} steps, {format_p(trend.p_value)}"


def monitors(trends: list[Trend], held_out: HeldOutSummary | None) -> list[MonitorWarning]:
    """The reward-hacking monitors that fire on these trends beside the held-out figures (the
    module's docstring states each rule and its thresholds)."""
    by_metric = {t.metric: t for t in trends}
    verdict = _held_out_verdict(held_out)
    flat = verdict is not None and not verdict[0]
    out: list[MonitorWarning] = []
    length = by_metric.get(COMPLETION_TOKENS_KEY)
    if (
        length is not None
        and flat
        and length.p_value < MONITOR_P
        and length.recent >= LENGTH_RATIO * length.first
        and length.recent - length.first >= LENGTH_MIN_TOKENS
    ):
        assert verdict is not None
        ratio = f"{length.recent / length.first:.1f}x" if length.first > 0 else "from nothing"
        out.append(
            MonitorWarning(
                monitor=Monitor.LENGTH_DRIFT,
                warning=(
                    f"Answers are getting longer while the held-out score does not rise: {length.first:.1f} tokens "
                    f"an answer on average in steps {_steps(length.first_steps)}, {length.recent:.1f} in steps "
                    f"{_steps(length.recent_steps)} ({ratio}; {_test(length)}), while {verdict[1]}. The reward may "
                    "be paying for length rather than for right answers (reward hacking)."
                ),
                advice=[
                    "Read what the model writes now: rl_get_rollouts(run_id); if longer answers earn more reward "
                    "without being more right, make the environment's score() pay for correctness only.",
                    "Cap the answer length (the environment's max_tokens) or penalise length in score().",
                    "Evaluate more often to see it sooner: rl_edit_config('eval_every', 5) for the next run.",
                ],
            )
        )
    collapse = by_metric.get(SINGLE_SHARE)
    top = by_metric.get(TOP_COMPLETION_SHARE_KEY)
    one_answer = top is not None and top.recent >= COLLAPSE_TOP_SHARE
    if (
        collapse is not None
        and (one_answer or flat)
        and not (verdict is not None and verdict[0])
        and collapse.p_value < MONITOR_P
        and collapse.recent >= COLLAPSE_SHARE
        and collapse.recent - collapse.first >= COLLAPSE_RISE
    ):
        out.append(
            MonitorWarning(
                monitor=Monitor.GROUP_COLLAPSE,
                warning=(
                    f"Groups are collapsing to one completion: in steps {_steps(collapse.recent_steps)} "
                    f"{collapse.recent:.0%} of groups sampled the very same answer every time, against "
                    f"{collapse.first:.0%} in steps {_steps(collapse.first_steps)} ({_test(collapse)})"
                    + (
                        f", and {top.recent:.0%} of all their answers were one and the same completion"
                        if top is not None and one_answer
                        else ""
                    )
                    + (f"; {verdict[1]}" if verdict is not None else "")
                    + ". Such groups carry no learning signal and sampling no longer explores: the model may have "
                    "settled on one answer whatever the item."
                ),
                advice=[
                    "See the repeated answer: rl_get_rollouts(run_id); if one answer scores well on many items, "
                    "make score() stricter (full credit only for the exact answer).",
                    "A smaller step keeps the policy from collapsing: rl_edit_config('learning_rate', ...) at half "
                    "of it, or keep an earlier checkpoint.",
                    "More answers per item: rl_edit_config('group_size', 8) (or 16).",
                ],
            )
        )
    reward = by_metric.get(REWARD_KEY)
    if reward is not None and flat and reward.p_value < MONITOR_P and reward.recent - reward.first >= REWARD_MIN_RISE:
        assert verdict is not None
        out.append(
            MonitorWarning(
                monitor=Monitor.REWARD_WITHOUT_HELD_OUT,
                warning=(
                    f"The training reward rises but the held-out score does not: the mean reward went "
                    f"{reward.first:.2f} (steps {_steps(reward.first_steps)}) -> {reward.recent:.2f} (steps "
                    f"{_steps(reward.recent_steps)}), {reward.recent - reward.first:+.2f} ({_test(reward)}), while "
                    f"{verdict[1]}. The model learns something the held-out check does not reward: a trick the "
                    "scorer pays for, or the training items themselves."
                ),
                advice=[
                    "Read the rewarded answers: rl_get_rollouts(run_id); if they are not right answers, make "
                    "score() stricter.",
                    "If the training items are few and repeat, use more (it may be memorising them).",
                    "If the held-out interval is wide, evaluate more items (rl_edit_config('held_out_limit', None)).",
                ],
            )
        )
    return out
