"""Did it learn the task, or a trick? Held-out figures beside their trivial baselines.

A paired test against the base says the trained model scores more than the base on these items; it
does not say the model learned the task. A model that answers one constant to every item (say "0"
to "how many r's in ...") scores exactly what that constant scores, and a lenient scorer pays
partial credit to a long digit string. So every verdict is read beside:

- **the best constant answer**: candidate answers (the most common answers of the evaluation and of
  the base, and the most common reference answers where the items carry real references) are each
  graded, by the environment's own grader, as the answer to *every* held-out item; the best of them
  is the constant baseline. A trained model that does not score above it is "not shown to have
  learned the task", whatever its p against the base.
- **the shape of its answers**: the share of distinct answers, the most common answer and its share,
  the share of items with full versus partial credit, the share of answers stopped at `max_tokens`
  (recorded per item where the evaluation knows it) and the share that repeat the prompt (see
  `repeats_prompt`). Past a stated threshold each becomes a warning with advice (the thresholds are
  the constants below; `THRESHOLDS` says them in words).
- **per group** (a task's `metadata(item)`, a mixture's dataset): the same constant baseline and
  shape within each group, since a model can learn one group and collapse on another.

An environment's own evaluate() that reports only an aggregate score gives no answers to grade:
no constant baseline can be computed for it, and the verdict says so (`NO_BASELINE_AGGREGATE`).

Stdlib, pydantic and the constant answers' one rule (mcp_rl.environments.constant_answers) only: the
trainer computes the baseline, the server reads it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from difflib import SequenceMatcher
from typing import Protocol

from pydantic import BaseModel, Field

# Answers compared as the model gave them, whitespace collapsed, cut to 200 characters;
# candidates for the constant baseline: the CANDIDATES_PER_SOURCE most common answers of each
# evaluation compared, and of the references (the same rule where an environment grades them).
from mcp_rl.environments.constant_answers import CANDIDATES_PER_SOURCE, most_common, normalised

# A warning when the most common answer covers at least this share of the items (and n >= MIN_ITEMS).
COLLAPSE_SHARE = 0.8
MIN_ITEMS = 10
# Scores within this of the constant baseline count as "no better than it".
TIE = 1e-9
# A warning when at least this share of the trained model's answers stopped at max_tokens (and
# more than the base's): a scorer reading a cut answer pays for its length, not its end.
AT_LIMIT_SHARE = 0.2
# A warning when at least this share of the trained model's answers repeat the prompt (and more
# than the base's).
ECHO_SHARE = 0.2
# An answer repeats the prompt when, case and whitespace ignored, it shares one unbroken stretch
# with the item's last user message of at least ECHO_PROMPT_SHARE of that message (at most
# ECHO_MAX_CHARS characters needed), for messages of at least ECHO_MIN_CHARS characters: "the
# question again, whole or its greater part", not a number that also occurs in it.
ECHO_PROMPT_SHARE = 0.5
ECHO_MAX_CHARS = 200
ECHO_MIN_CHARS = 12
THRESHOLDS = (
    f"answer collapse: one answer to >= {COLLAPSE_SHARE:.0%} of >= {MIN_ITEMS} items while the model is not "
    f"above the best constant answer; partial credit: a gain with no more full-credit items than the base; "
    f"max_tokens: >= {AT_LIMIT_SHARE:.0%} of answers stopped at the token limit, more than the base; prompt "
    f"echo: >= {ECHO_SHARE:.0%} of answers repeat the prompt (one stretch of >= {ECHO_PROMPT_SHARE:.0%} of the "
    f"last user message, case and whitespace ignored), more than the base"
)
NO_BASELINE_AGGREGATE = (
    "No constant baseline can be computed for these figures: the environment's own evaluate() reported only an "
    "aggregate score, not each item's answer and score, so what one answer given to every item would score is "
    "unknown, and a gain here may be a constant answer or a scorer's partial credit. Have its evaluate() pass "
    "per-item samples (each with its 'score' and the model's 'response') to self.evaluate_log to get them."
)
ADVICE = (
    "try a larger group_size (more answers to compare per prompt), a lower temperature, a stricter "
    "scorer (full credit only for the exact answer), easier items, or more steps"
)


class GroupConstant(BaseModel):
    """The best constant answer within one group of the items."""

    answer: str
    score: float
    n: int


class ConstantBaseline(BaseModel):
    """What one answer given to every held-out item scores (the best candidate tried)."""

    answer: str = Field(description="The constant answer (whitespace collapsed, cut to 200 characters).")
    score: float = Field(description="Its mean score over the held-out items, by the environment's own grader.")
    source: str = Field(description="Where the candidate came from (an evaluation's most common answer, a reference).")
    candidates: int = Field(description="Candidate answers graded.")
    lower_bound: bool = Field(
        False,
        description="True: no grader was at hand (an environment's own evaluate()), so the answer is credited only "
        "where a model gave it: the constant scores at least this.",
    )
    groups: dict[str, GroupConstant] = Field(
        default_factory=dict, description="The best constant answer within each group of the items (by label)."
    )


class AnswerShape(BaseModel):
    """The answers of one evaluation, read for degeneracy."""

    n: int
    distinct_share: float = Field(description="Distinct answers / items.")
    top_answer: str = Field(description="The most common answer (whitespace collapsed, cut).")
    top_share: float = Field(description="Share of items given the most common answer.")
    exact_share: float = Field(description="Share of items with full credit (the top of the score range).")
    partial_share: float = Field(description="Share of items with some credit but not full.")
    at_limit_share: float | None = Field(
        None,
        description="Share of answers whose generation stopped at max_tokens (cut, not finished); None: not "
        "recorded by this evaluation.",
    )
    echo_share: float | None = Field(
        None, description="Share of answers that repeat the prompt (see THRESHOLDS); None: prompts not known."
    )


def best_constant(
    answers: Sequence[str],
    grade: Callable[[str, int], float],
    completions: Mapping[str, Sequence[str]],
    references: Sequence[str] | None = None,
    groups: Sequence[str | None] | None = None,
) -> ConstantBaseline | None:
    """Grade each candidate as the answer to every item (`grade(candidate, item_index)`) and keep
    the best. `answers`: one entry per item (its reference, for the count only). `completions`:
    evaluations' answers by name ("step 0", "step 30"); `references`: real reference answers (None
    where the items' answers are not texts a model could give, such as a task's item indices);
    `groups`: each item's label, for the best constant within each group too."""
    n = len(answers)
    if n == 0:
        return None
    sources: dict[str, str] = {}
    for name, texts in completions.items():
        for text in most_common(texts, CANDIDATES_PER_SOURCE):
            sources.setdefault(text, f"the most common answer at {name}")
    if references is not None:
        for text in most_common(references, CANDIDATES_PER_SOURCE):
            sources.setdefault(text, "the most common reference answer")
    best: ConstantBaseline | None = None
    graded: dict[str, list[float]] = {}
    for candidate, source in sources.items():
        try:
            scores = [float(grade(candidate, i)) for i in range(n)]
        except Exception:  # a grader that cannot take this answer: not a candidate
            continue
        graded[candidate] = scores
        score = sum(scores) / n
        if best is None or score > best.score + TIE:
            best = ConstantBaseline(answer=candidate, score=score, source=source, candidates=0)
    if best is not None:
        best.candidates = len(graded)
        if groups is not None and len(groups) == n:
            best.groups = group_constants(answers, groups, graded)
    return best


def _folded(text: str) -> str:
    return " ".join(text.split()).casefold()


def repeats_prompt(completion: str, prompt: str) -> bool:
    """True when the answer repeats the prompt (its last user message): case and whitespace
    ignored, one unbroken stretch of both covers at least ECHO_PROMPT_SHARE of the message (or
    ECHO_MAX_CHARS characters of a long one). Messages shorter than ECHO_MIN_CHARS never count."""
    question, answer = _folded(prompt), _folded(completion)
    if len(question) < ECHO_MIN_CHARS or not answer:
        return False
    need = min(ECHO_PROMPT_SHARE * len(question), ECHO_MAX_CHARS)
    if len(answer) < need:
        return False
    match = SequenceMatcher(None, question, answer, autojunk=False).find_longest_match(0, len(question), 0, len(answer))
    return match.size >= need


def last_user_text(messages: Sequence[Mapping[str, object]]) -> str:
    """The content of the last user message (what an echo would repeat); "" when none."""
    for message in reversed(messages):
        if message.get("role") == "user" and isinstance(message.get("content"), str):
            return str(message["content"])
    return ""


def _share(flags: Sequence[bool | None]) -> float | None:
    """Share of True among the recorded flags; None when none of them was recorded."""
    known = [f for f in flags if f is not None]
    return sum(known) / len(known) if known else None


def answer_shape(
    completions: Sequence[str],
    scores: Sequence[float],
    top_score: float = 1.0,
    at_limit: Sequence[bool | None] | None = None,
    echo: Sequence[bool | None] | None = None,
) -> AnswerShape | None:
    n = len(completions)
    if n == 0 or n != len(scores):
        return None
    counts = Counter(normalised(t) for t in completions)
    top_answer, top_count = counts.most_common(1)[0]
    exact = sum(1 for s in scores if s >= top_score - TIE)
    partial = sum(1 for s in scores if 0 < s < top_score - TIE)
    return AnswerShape(
        n=n,
        distinct_share=len(counts) / n,
        top_answer=top_answer,
        top_share=top_count / n,
        exact_share=exact / n,
        partial_share=partial / n,
        at_limit_share=_share(at_limit) if at_limit is not None else None,
        echo_share=_share(echo) if echo is not None else None,
    )


def learned(trained_score: float, constant: ConstantBaseline | None) -> bool | None:
    """False when one constant answer scores as well as the trained model (None: no baseline, or
    only a lower bound of it that the model is above)."""
    if constant is None:
        return None
    above = trained_score > constant.score + TIE
    if constant.lower_bound and above:
        return None
    return above


def verdict_sentence(sentence: str, trained_score: float, constant: ConstantBaseline | None) -> str:
    """The paired test's sentence with the constant baseline beside it."""
    if constant is None:
        return sentence
    # The paired test's sentence ends at its bracket: a full stop before the baseline's own sentence.
    sentence = sentence.rstrip()
    sentence = sentence if sentence.endswith(".") else f"{sentence}."
    said = f'answering "{constant.answer}" to every item ({constant.source})'
    if constant.lower_bound and learned(trained_score, constant) is None:
        return (
            f"{sentence} The best constant answer read from the answers, {said}, scores at least "
            f"{constant.score:.2f}; with no grader at hand its full score is unknown, so the model is not shown "
            "above it."
        )
    if learned(trained_score, constant):
        return f"{sentence} The best constant answer, {said}, scores {constant.score:.2f}: the model is above it."
    return (
        f"Not shown to have learned the task: {sentence} But {said} scores {constant.score:.2f}, "
        f"{'more than' if constant.score > trained_score + TIE else 'as much as'} the trained model's "
        f"{trained_score:.2f}: a gain a constant answer also achieves is not learning."
    )


def shape_warnings(
    base: AnswerShape | None,
    trained: AnswerShape | None,
    base_score: float,
    trained_score: float,
    above_constant: bool | None = None,
) -> list[str]:
    """Warnings read from the trained model's answers (and the base's), each with advice. A task
    with few possible answers gives few distinct answers even when learned, so a collapse warns
    only when the model is not shown above the constant baseline (`above_constant` not True)."""
    out: list[str] = []
    if trained is None or trained.n < MIN_ITEMS:
        return out
    if trained.top_share >= COLLAPSE_SHARE and above_constant is not True:
        out.append(
            f'The trained model gives one answer, "{trained.top_answer}", to {trained.top_share:.0%} of the '
            f"{trained.n} held-out items (answer collapse): its score is mostly what that constant scores; {ADVICE}."
        )
    if base is not None and trained_score > base_score + TIE and trained.exact_share <= base.exact_share + TIE:
        out.append(
            f"The gain is partial credit: items answered with full credit went {base.exact_share:.0%} -> "
            f"{trained.exact_share:.0%} while items with partial credit went {base.partial_share:.0%} -> "
            f"{trained.partial_share:.0%}; the scorer may be paying for the shape of an answer, not its "
            f"correctness: {ADVICE}."
        )
    before_limit = base.at_limit_share if base is not None else None
    if (
        trained.at_limit_share is not None
        and trained.at_limit_share >= AT_LIMIT_SHARE
        and trained.at_limit_share > (before_limit or 0.0) + TIE
    ):
        was = f" (the base's: {before_limit:.0%})" if before_limit is not None else ""
        out.append(
            f"{trained.at_limit_share:.0%} of the trained model's answers stopped at max_tokens{was}, cut before "
            "they ended: a scorer that pays a cut answer pays for length, not for an answer. Read a few of them; "
            f"raise max_new_tokens if the task needs longer answers, else {ADVICE}."
        )
    before_echo = base.echo_share if base is not None else None
    if (
        trained.echo_share is not None
        and trained.echo_share >= ECHO_SHARE
        and trained.echo_share > (before_echo or 0.0) + TIE
    ):
        was = f" (the base's: {before_echo:.0%})" if before_echo is not None else ""
        out.append(
            f"{trained.echo_share:.0%} of the trained model's answers repeat the prompt{was}: a scorer that finds "
            f"the answer anywhere in the reply pays for copying the question; {ADVICE}."
        )
    return out


def constant_from_answers(evaluations: Mapping[str, Sequence[tuple[str, str, float]]]) -> ConstantBaseline | None:
    """The best constant answer when no grader is at hand (an environment's own evaluate() graded
    the answers): each answer any evaluation gave, credited with the score it got on the items
    where it was given and 0 elsewhere. A lower bound of what that answer would score on every
    item (exact for a model that gave it to every item). `evaluations`: (item, completion, score)
    rows by name."""
    items = {item for rows in evaluations.values() for item, _, _ in rows}
    if not items:
        return None
    credited: dict[str, dict[str, float]] = {}
    for rows in evaluations.values():
        for item, text, score in rows:
            credited.setdefault(normalised(text), {})[item] = score
    answer, scores = max(credited.items(), key=lambda kv: sum(kv[1].values()))
    return ConstantBaseline(
        answer=answer,
        score=sum(scores.values()) / len(items),
        source="a model's own answer, credited only on the items where it was given (at least this)",
        candidates=len(credited),
        lower_bound=True,
    )


def constant_from_grades(base: Sequence[Row], trained: Sequence[Row]) -> ConstantBaseline | None:
    """The best constant answer as the environment's own evaluate() graded it (each row's
    `constants`: a few answers and what each scores on that item), over the paired items: exact,
    not a lower bound. An evaluation's candidates count only when it graded them on every item;
    None when neither did."""
    n = len(trained)
    graded: dict[str, list[float]] = {}
    sources: dict[str, str] = {}
    for name, rows in (("the base's", base), ("the trained model's", trained)):
        if n == 0 or len(rows) != n or any(r.constants is None for r in rows):
            continue
        for candidate in rows[0].constants or {}:
            if candidate in graded or not all(candidate in (r.constants or {}) for r in rows):
                continue
            graded[candidate] = [(r.constants or {})[candidate] for r in rows]
            sources[candidate] = (
                f"a common answer or reference, graded by the environment's own scorer in {name} evaluation"
            )
    if not graded:
        return None
    answer = max(graded, key=lambda c: sum(graded[c]))
    best = ConstantBaseline(
        answer=answer, score=sum(graded[answer]) / n, source=sources[answer], candidates=len(graded)
    )
    groups = [r.group for r in trained]
    if any(g is not None for g in groups):
        best.groups = group_constants([r.item for r in trained], groups, graded)
    return best


def group_constants(
    answers: Sequence[str], groups: Sequence[str | None], graded: Mapping[str, Sequence[float]]
) -> dict[str, GroupConstant]:
    """The best candidate within each group, from the grades of every candidate on every item
    (`graded[candidate][i]`), so a group costs no extra grading."""
    names = sorted({g for g in groups if g is not None})
    out: dict[str, GroupConstant] = {}
    for name in names:
        members = [i for i, g in enumerate(groups) if g == name]
        best: GroupConstant | None = None
        for candidate, scores in graded.items():
            score = sum(scores[i] for i in members) / len(members)
            if best is None or score > best.score + TIE:
                best = GroupConstant(answer=candidate, score=score, n=len(members))
        if best is not None:
            out[name] = best
    return out


class Verdict(BaseModel):
    """A held-out comparison read beside its trivial baselines: the one verdict rl_check_status,
    rl_get_results and rl_evaluate_checkpoint give (`judge` makes it)."""

    sentence: str = Field(description="The paired test's sentence with the constant baseline beside it.")
    learned: bool | None = Field(
        description="False: one constant answer given to every item scores as much as the trained model, so the "
        "figures do not show it learned the task, whatever p says. True: above that baseline. None: no baseline."
    )
    constant_baseline: ConstantBaseline | None = Field(
        description="The best constant answer over these items and what it scores (the trivial baseline)."
    )
    answers: AnswerShape | None = Field(
        description="The trained model's answers: distinct share, most common answer, full/partial credit."
    )
    base_answers: AnswerShape | None = Field(description="The same for the base.")
    warnings: list[str] = Field(
        description="What the answers show beside the figures (collapse to one answer, a gain made of partial "
        "credit), each with advice. Report them with the figures."
    )


class Row(Protocol):
    """One evaluation row as the verdict reads it (mcp_rl.proof.outcomes.ItemOutcome)."""

    item: str
    completion: str
    score: float
    at_limit: bool | None
    echo: bool | None
    group: str | None
    constants: dict[str, float] | None


def judge(
    sentence: str,
    base: Sequence[Row],
    trained: Sequence[Row],
    constant: ConstantBaseline | None,
) -> Verdict:
    """The verdict on paired items: `base` and `trained` are the rows of the same items in the same
    order; `sentence` is the paired test's; `constant` the graded baseline when a grader was at hand,
    else (an environment's own evaluate() graded the answers) the constants it graded itself, else
    the lower bound read from the answers."""
    if constant is None:
        constant = constant_from_grades(base, trained)
    if constant is None:
        constant = constant_from_answers(
            {
                "base": [(r.item, r.completion, r.score) for r in base],
                "trained": [(r.item, r.completion, r.score) for r in trained],
            }
        )
    base_score = sum(r.score for r in base) / len(base) if base else 0.0
    trained_score = sum(r.score for r in trained) / len(trained) if trained else 0.0
    top = max([1.0, *(r.score for r in base), *(r.score for r in trained)])
    base_shape = shape_of(base, top)
    trained_shape = shape_of(trained, top)
    above = learned(trained_score, constant)
    return Verdict(
        sentence=verdict_sentence(sentence, trained_score, constant),
        learned=above,
        constant_baseline=constant,
        answers=trained_shape,
        base_answers=base_shape,
        warnings=shape_warnings(base_shape, trained_shape, base_score, trained_score, above),
    )


def shape_of(rows: Sequence[Row], top: float) -> AnswerShape | None:
    """The answers' shape of `rows` (`top`: the full-credit score)."""
    return answer_shape(
        [r.completion for r in rows],
        [r.score for r in rows],
        top,
        [r.at_limit for r in rows],
        [r.echo for r in rows],
    )
