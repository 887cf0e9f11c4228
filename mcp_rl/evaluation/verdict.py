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
  and the share of items with full versus partial credit. Past a threshold each becomes a warning
  with advice.

Stdlib and pydantic only: the trainer computes the baseline, the server reads it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence

from pydantic import BaseModel, Field

# Answers compared as the model gave them, whitespace collapsed, cut to this many characters.
ANSWER_CHARS = 200
# Candidates for the constant baseline: the most common answers of each evaluation compared, and
# of the references.
CANDIDATES_PER_SOURCE = 3
# A warning when the most common answer covers at least this share of the items (and n >= MIN_ITEMS).
COLLAPSE_SHARE = 0.8
MIN_ITEMS = 10
# Scores within this of the constant baseline count as "no better than it".
TIE = 1e-9
ADVICE = (
    "try a larger group_size (more answers to compare per prompt), a lower temperature, a stricter "
    "scorer (full credit only for the exact answer), easier items, or more steps"
)


class ConstantBaseline(BaseModel):
    """What one answer given to every held-out item scores (the best candidate tried)."""

    answer: str = Field(description="The constant answer (whitespace collapsed, cut to 200 characters).")
    score: float = Field(description="Its mean score over the held-out items, by the environment's own grader.")
    source: str = Field(description="Where the candidate came from (an evaluation's most common answer, a reference).")
    candidates: int = Field(description="Candidate answers graded.")


class AnswerShape(BaseModel):
    """The answers of one evaluation, read for degeneracy."""

    n: int
    distinct_share: float = Field(description="Distinct answers / items.")
    top_answer: str = Field(description="The most common answer (whitespace collapsed, cut).")
    top_share: float = Field(description="Share of items given the most common answer.")
    exact_share: float = Field(description="Share of items with full credit (the top of the score range).")
    partial_share: float = Field(description="Share of items with some credit but not full.")


def normalised(text: str) -> str:
    return " ".join(text.split())[:ANSWER_CHARS]


def _most_common(texts: Iterable[str], k: int) -> list[str]:
    counts = Counter(normalised(t) for t in texts)
    return [text for text, _ in counts.most_common(k)]


def best_constant(
    answers: Sequence[str],
    grade: Callable[[str, int], float],
    completions: Mapping[str, Sequence[str]],
    references: Sequence[str] | None = None,
) -> ConstantBaseline | None:
    """Grade each candidate as the answer to every item (`grade(candidate, item_index)`) and keep
    the best. `answers`: one entry per item (its reference, for the count only). `completions`:
    evaluations' answers by name ("step 0", "step 30"); `references`: real reference answers (None
    where the items' answers are not texts a model could give, such as a task's item indices)."""
    n = len(answers)
    if n == 0:
        return None
    sources: dict[str, str] = {}
    for name, texts in completions.items():
        for text in _most_common(texts, CANDIDATES_PER_SOURCE):
            sources.setdefault(text, f"the most common answer at {name}")
    if references is not None:
        for text in _most_common(references, CANDIDATES_PER_SOURCE):
            sources.setdefault(text, "the most common reference answer")
    best: ConstantBaseline | None = None
    graded = 0
    for candidate, source in sources.items():
        try:
            score = sum(grade(candidate, i) for i in range(n)) / n
        except Exception:  # a grader that cannot take this answer: not a candidate
            continue
        graded += 1
        if best is None or score > best.score + TIE:
            best = ConstantBaseline(answer=candidate, score=score, source=source, candidates=0)
    if best is not None:
        best.candidates = graded
    return best


def answer_shape(completions: Sequence[str], scores: Sequence[float], top_score: float = 1.0) -> AnswerShape | None:
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
    )


def learned(trained_score: float, constant: ConstantBaseline | None) -> bool | None:
    """False when one constant answer scores as well as the trained model (None: no baseline)."""
    if constant is None:
        return None
    return trained_score > constant.score + TIE


def verdict_sentence(sentence: str, trained_score: float, constant: ConstantBaseline | None) -> str:
    """The paired test's sentence with the constant baseline beside it."""
    if constant is None:
        return sentence
    said = f'answering "{constant.answer}" to every item ({constant.source})'
    if learned(trained_score, constant):
        return f"{sentence} The best constant answer, {said}, scores {constant.score:.2f}: the model is above it."
    return (
        f"Not shown to have learned the task: {sentence} But {said} scores {constant.score:.2f}, as much as the "
        f"trained model's {trained_score:.2f}: a gain a constant answer also achieves is not learning."
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


def judge(
    sentence: str,
    base: Sequence[tuple[str, float]],
    trained: Sequence[tuple[str, float]],
    constant: ConstantBaseline | None,
) -> Verdict:
    """The verdict on paired items: `base` and `trained` are (completion, score) per item, in the
    same item order; `sentence` is the paired test's."""
    base_score = sum(s for _, s in base) / len(base) if base else 0.0
    trained_score = sum(s for _, s in trained) / len(trained) if trained else 0.0
    top = max([1.0, *(s for _, s in base), *(s for _, s in trained)])
    base_shape = answer_shape([c for c, _ in base], [s for _, s in base], top)
    trained_shape = answer_shape([c for c, _ in trained], [s for _, s in trained], top)
    above = learned(trained_score, constant)
    return Verdict(
        sentence=verdict_sentence(sentence, trained_score, constant),
        learned=above,
        constant_baseline=constant,
        answers=trained_shape,
        base_answers=base_shape,
        warnings=shape_warnings(base_shape, trained_shape, base_score, trained_score, above),
    )
