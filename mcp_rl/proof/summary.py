"""Did it learn? The held-out figures of a run, from its per-item outcome files: the base (the
run's first evaluation) against the latest evaluation on the same items, with the paired test.
What rl_check_status and rl_get_results show (stdlib and pydantic at import: the statistics import
scipy when they run)."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field

from mcp_rl.errors import UserError
from mcp_rl.proof.outcomes import (
    ItemOutcome,
    evaluated_steps,
    read_aggregates,
    read_constant,
    read_measure,
    read_outcomes,
)
from mcp_rl.proof.stats import paired_comparison, unpaired_comparison
from mcp_rl.proof.verdict import (
    ADVICE,
    NO_BASELINE_AGGREGATE,
    THRESHOLDS,
    AnswerShape,
    ConstantBaseline,
    constant_from_answers,
    judge,
    learned,
    shape_of,
)
from mcp_rl.rundir import eval_outcomes_file

# Evaluations listed (first, last and evenly spaced between): a status call reads each one's file.
MAX_POINTS = 20
# A group's constant-answer warning needs at least this many items (fewer: noise).
MIN_GROUP_ITEMS = 5


def _thin(steps: list[int]) -> list[int]:
    if len(steps) <= MAX_POINTS:
        return steps
    stride = (len(steps) - 1) / (MAX_POINTS - 1)
    return sorted({steps[round(i * stride)] for i in range(MAX_POINTS)})


class EvalPoint(BaseModel):
    step: int
    score: float
    n: int


class GroupFigures(BaseModel):
    """One label's items (a mixture's dataset): base -> latest, paired."""

    group: str
    n: int
    base_score: float
    trained_score: float
    difference: float
    ci_low: float
    ci_high: float
    p_value: float
    test: str
    learned: bool | None = Field(
        None, description="False: one constant answer scores as much as the trained model within this group."
    )
    constant_baseline: ConstantBaseline | None = Field(None, description="The best constant answer within the group.")
    answers: AnswerShape | None = Field(None, description="The trained model's answers within the group.")


class HeldOutSummary(BaseModel):
    """Base -> trained on the same held-out items (every score a mean over the items)."""

    n: int | None = Field(
        description="Held-out items in both evaluations (None: the environment's own evaluate() did not say)."
    )
    paired: bool = Field(
        True,
        description="Per-item outcomes compared item by item (False: the environment's own evaluate() reported "
        "only an aggregate score, compared unpaired).",
    )
    base_step: int = Field(description="Step of the run's first evaluation (0: the base model).")
    step: int | None = Field(None, description="Step of the latest evaluation (None: only the base so far).")
    base_score: float
    trained_score: float | None = None
    difference: float | None = Field(None, description="trained_score - base_score.")
    ci_low: float | None = Field(None, description="95 % interval of the difference, low end.")
    ci_high: float | None = None
    p_value: float | None = Field(None, description="Two-sided p of the paired test (no difference on these items).")
    test: str | None = None
    wins: int | None = Field(None, description="Items the trained model got right (or better) and the base did not.")
    losses: int | None = Field(None, description="Items the base got right (or better) and the trained model did not.")
    sentence: str
    groups: list[GroupFigures] = Field(
        default_factory=list,
        description="The same comparison per label of the items (a reasoning-gym mixture's datasets), when they "
        "carry one.",
    )
    evaluations: list[EvalPoint] = Field(
        default_factory=list,
        description=f"The run's evaluations by step (at most {MAX_POINTS}: first, last, evenly between).",
    )
    learned: bool | None = Field(
        None,
        description="False: one constant answer given to every item scores as much as the trained model, so the "
        "figures do not show it learned the task, whatever p says. True: above that baseline. None: no baseline.",
    )
    constant_baseline: ConstantBaseline | None = Field(
        None, description="The best constant answer over these items and what it scores (the trivial baseline)."
    )
    answers: AnswerShape | None = Field(
        None, description="The latest evaluation's answers: distinct share, most common answer, full/partial credit."
    )
    base_answers: AnswerShape | None = Field(None, description="The same for the base evaluation.")
    warnings: list[str] = Field(
        default_factory=list,
        description="What the answers show beside the figures (collapse to one answer, a gain made of partial "
        "credit, answers cut at max_tokens, answers repeating the prompt, per group too), each with advice. "
        "Report them with the figures.",
    )
    thresholds: str = Field(THRESHOLDS, description="When each warning above is given.")
    measure: str | None = Field(
        None,
        description="An environment's own evaluate(): which of its metrics the figures are, where it came from "
        "(evaluate_log, eval_metrics, the returned dict, wandb_log, wandb.log) and where n came from.",
    )


def held_out_summary(run_dir: Path) -> HeldOutSummary | None:
    """None when the run has no held-out evaluation yet."""
    summary = _held_out_summary(run_dir)
    if summary is not None:
        summary.measure = read_measure(run_dir)
    return summary


def _held_out_summary(run_dir: Path) -> HeldOutSummary | None:
    steps = _thin(evaluated_steps(run_dir))
    scores = {}
    rows: dict[int, list[ItemOutcome]] = {}
    labels: dict[str, str] = {}
    for step in steps:
        outcomes = read_outcomes(eval_outcomes_file(run_dir, step))
        if outcomes:
            rows[step] = outcomes
            scores[step] = {o.item: o.score for o in outcomes}
            labels.update({o.item: o.group for o in outcomes if o.group is not None})
    if not scores:
        return _aggregate_summary(run_dir)
    ordered = sorted(scores)
    points = [EvalPoint(step=s, score=sum(v.values()) / len(v), n=len(v)) for s, v in sorted(scores.items())]
    first = ordered[0]
    base = scores[first]
    if len(ordered) == 1:
        mean = sum(base.values()) / len(base)
        return HeldOutSummary(
            n=len(base),
            base_step=first,
            base_score=mean,
            sentence=f"On {len(base)} held-out items the model scored {mean:.2f} at step {first} (the base); "
            "no later evaluation yet.",
            evaluations=points,
        )
    last = ordered[-1]
    now = scores[last]
    common = [item for item in now if item in base]
    try:
        result = paired_comparison(
            [base[i] for i in common], [now[i] for i in common], trained_name=f"the model at step {last}"
        )
    except UserError:
        return None
    by_item = {o.item: o for o in rows[first]}
    paired = [(by_item[o.item], o) for o in rows[last] if o.item in by_item]
    base_rows = [b for b, _ in paired]
    now_rows = [t for _, t in paired]
    # The graded baseline the trainer wrote; else (an environment's own evaluate() graded the
    # answers, no grader here) `judge` reads the best one from the answers, a lower bound.
    verdict = judge(result.sentence, base_rows, now_rows, read_constant(run_dir, last))
    top = max([1.0, *base.values(), *now.values()])
    groups = _by_group(common, base, now, labels, base_rows, now_rows, verdict.constant_baseline, top)
    return HeldOutSummary(
        n=result.n,
        base_step=first,
        step=last,
        base_score=result.base_score,
        trained_score=result.trained_score,
        difference=result.difference,
        ci_low=result.ci_low,
        ci_high=result.ci_high,
        p_value=result.p_value,
        test=result.test,
        wins=result.wins,
        losses=result.losses,
        sentence=verdict.sentence,
        learned=verdict.learned,
        constant_baseline=verdict.constant_baseline,
        answers=verdict.answers,
        base_answers=verdict.base_answers,
        warnings=verdict.warnings + _group_warnings(groups),
        groups=groups,
        evaluations=points,
    )


def _triples(outcomes: list[ItemOutcome]) -> list[tuple[str, str, float]]:
    return [(o.item, o.completion, o.score) for o in outcomes]


def _by_group(
    common: list[str],
    base: dict[str, float],
    now: dict[str, float],
    labels: dict[str, str],
    base_rows: list[ItemOutcome],
    now_rows: list[ItemOutcome],
    constant: ConstantBaseline | None,
    top: float,
) -> list[GroupFigures]:
    names = sorted({labels[i] for i in common if i in labels})
    if len(names) < 2:
        return []
    out = []
    for name in names:
        items = [i for i in common if labels.get(i) == name]
        r = paired_comparison([base[i] for i in items], [now[i] for i in items])
        mine = set(items)
        theirs = [o for o in base_rows if o.item in mine]
        ours = [o for o in now_rows if o.item in mine]
        graded = constant.groups.get(name) if constant is not None else None
        if graded is not None:
            group_constant: ConstantBaseline | None = ConstantBaseline(
                answer=graded.answer, score=graded.score, source=constant.source if constant else "", candidates=0
            )
        else:
            group_constant = constant_from_answers({"base": _triples(theirs), "trained": _triples(ours)})
        out.append(
            GroupFigures(
                group=name,
                n=r.n,
                base_score=r.base_score,
                trained_score=r.trained_score,
                difference=r.difference,
                ci_low=r.ci_low,
                ci_high=r.ci_high,
                p_value=r.p_value,
                test=r.test,
                learned=learned(r.trained_score, group_constant),
                constant_baseline=group_constant,
                answers=shape_of(ours, top),
            )
        )
    return out


def _group_warnings(groups: list[GroupFigures]) -> list[str]:
    """A group the model gained on where one constant answer does as well (the collapse of one
    group hidden in a run-wide figure): named, with its constant."""
    out = []
    for g in groups:
        c = g.constant_baseline
        if g.learned is False and c is not None and g.difference > 0 and g.n >= MIN_GROUP_ITEMS:
            out.append(
                f"Group {g.group}: the gain ({g.base_score:.2f} -> {g.trained_score:.2f}, n={g.n}) is what answering "
                f'"{c.answer}" to every item of the group scores ({c.score:.2f}): not shown learned there; {ADVICE}.'
            )
    return out


def _aggregate_summary(run_dir: Path) -> HeldOutSummary | None:
    """An environment whose own evaluate() reports only an aggregate score: its first evaluation
    against its latest, unpaired (the sentence says so)."""
    found = read_aggregates(run_dir)
    if not found:
        return None
    points = [EvalPoint(step=a.step, score=a.score, n=a.n or 0) for a in found]
    first, last = found[0], found[-1]
    if len(found) == 1:
        return HeldOutSummary(
            n=first.n,
            paired=False,
            base_step=first.step,
            base_score=first.score,
            sentence=f"The environment's own evaluation scored {first.score:.2f} ({first.score_key}) at step "
            f"{first.step} (the base); no later evaluation yet.",
            evaluations=points,
        )
    result = unpaired_comparison(
        first.score, first.n, last.score, last.n, trained_name=f"the model at step {last.step}"
    )
    return HeldOutSummary(
        n=result.n,
        paired=False,
        base_step=first.step,
        step=last.step,
        base_score=result.base_score,
        trained_score=result.trained_score,
        difference=result.difference,
        ci_low=result.ci_low,
        ci_high=result.ci_high,
        p_value=result.p_value,
        test=result.test,
        sentence=f"{result.sentence} {NO_BASELINE_AGGREGATE}",
        evaluations=points,
    )
