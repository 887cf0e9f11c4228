"""Constant answers graded by an environment's own scorer, inside its own evaluate().

A held-out gain is learning only when no single answer given to every item scores as much
(mcp_rl.proof.verdict). mcp-rl grades such constant answers itself where it holds the scorer (its
bundled arithmetic and GSM8K, a task's score()). An environment evaluated by its own evaluate()
holds its scorer in its own process, so it grades them there: a per-item sample may carry

    "constant_scores": {"<answer>": <what that answer scores on this item>, ...}

for a few candidate answers (the same ones on every item): the evaluation's most common answers and
the most common reference answers. mcp-rl then reads the best constant's full score from the
samples instead of a lower bound. mcp-rl's single-turn base (reasoning-gym) does this; any Atropos
environment may add the field to the samples it passes to `evaluate_log`.

Answers are compared as the model gave them, whitespace collapsed and cut to ANSWER_CHARS: the
verdict normalises the same way, so the answer shown is the answer graded.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar

# The sample field that carries them.
SAMPLE_KEY = "constant_scores"
ANSWER_CHARS = 200
# Candidates: the most common answers of an evaluation, and of the references.
CANDIDATES_PER_SOURCE = 3

Item = TypeVar("Item")


def normalised(text: str) -> str:
    return " ".join(text.split())[:ANSWER_CHARS]


def most_common(texts: Iterable[str], k: int = CANDIDATES_PER_SOURCE) -> list[str]:
    """The k most common of `texts`, normalised (ties: first seen first)."""
    counts = Counter(normalised(t) for t in texts)
    return [text for text, _ in counts.most_common(k)]


def constant_scores(
    items: Sequence[Item],
    texts: Sequence[str],
    references: Sequence[str | None],
    score: Callable[[str, Item], float],
) -> list[dict[str, float]]:
    """Per item, what each candidate answer scores on it by `score` (the environment's reward):
    the most common of `texts` (this evaluation's answers) and of `references` (None: the item has
    none). A candidate the scorer fails on, or scores with something that is not a finite number, is
    left out of every item, so each item's dict names the same answers."""
    candidates = list(dict.fromkeys([*most_common(texts), *most_common(r for r in references if r is not None)]))
    graded: dict[str, list[float]] = {}
    for candidate in candidates:
        try:
            scores = [float(score(candidate, item)) for item in items]
        except Exception:  # a scorer that cannot take this answer: not a candidate
            continue
        if all(math.isfinite(s) for s in scores):  # a NaN or infinite score would win or poison the max
            graded[candidate] = scores
    return [{candidate: scores[i] for candidate, scores in graded.items()} for i in range(len(items))]
