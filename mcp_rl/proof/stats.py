"""Paired comparison of a base model and a trained one on the same held-out items.

Each item has one outcome per model (1/0 for right/wrong, or a graded score); the two lists are
paired by position. 0/1 outcomes get McNemar's exact test (a two-sided binomial test on the
items that flipped) and Newcombe's interval for a difference of paired proportions (his method
10: Wilson score intervals of both scores joined through the phi correlation). Graded outcomes
get the Wilcoxon signed-rank test and a paired bootstrap percentile interval of the mean
difference with a fixed seed, so the same outcomes always give the same figures.

The paired tests, the Wilson intervals and the paired bootstrap are scipy.stats'; the rise
between two windows of steps (rl_check_status, every call) stays hand-written and cheap; Newcombe's square-and-add
intervals (paired and unpaired) have no scipy counterpart and are built here on its Wilson
intervals. scipy.stats takes over a second of CPU to import, and the server imports this module
(rl_check_status and rl_get_results show these figures): every function imports it when it runs,
so the server's start-up never does.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict

from mcp_rl.errors import UserError

MCNEMAR_TEST = "McNemar exact (two-sided)"
WILCOXON_TEST = "Wilcoxon signed-rank (two-sided)"
NEWCOMBE_CI = "Newcombe paired Wilson score (method 10)"
BOOTSTRAP_CI = "paired bootstrap percentile"

CONFIDENCE = 0.95
BOOTSTRAP_RESAMPLES = 4000
BOOTSTRAP_SEED = 0


class PairedComparison(BaseModel):
    """Base vs trained on the same n items (every score is a mean over the items)."""

    model_config = ConfigDict(extra="forbid")

    n: int
    base_score: float
    trained_score: float
    difference: float  # trained - base
    ci_low: float  # 95 % interval of the difference
    ci_high: float
    confidence: float = CONFIDENCE
    p_value: float  # two-sided, null: neither model is better on these items
    test: str  # MCNEMAR_TEST or WILCOXON_TEST
    interval: str  # how the interval was made (NEWCOMBE_CI or BOOTSTRAP_CI ...)
    binary: bool  # every outcome was 0 or 1
    wins: int  # items where the trained model did better than the base
    losses: int  # items where it did worse
    ties: int  # items where both did the same
    sentence: str


def paired_comparison(
    base: Sequence[float],
    trained: Sequence[float],
    *,
    items: str = "held-out items",
    base_name: str = "the base",
    trained_name: str = "the trained model",
) -> PairedComparison:
    """Compare per-item outcomes `trained[i]` against `base[i]` (same item i).

    Raises UserError for lists of different lengths, no items, or a non-finite outcome."""
    b = _checked(base, "base")
    t = _checked(trained, "trained")
    if len(b) != len(t):
        raise UserError(
            f"a paired comparison needs one outcome per item from each model; got {len(b)} base and {len(t)} trained outcomes."
        )
    n = len(b)
    if n == 0:
        raise UserError("no items to compare: the evaluation produced no outcomes, so there is nothing to test.")
    wins = sum(1 for x, y in zip(b, t, strict=True) if y > x)
    losses = sum(1 for x, y in zip(b, t, strict=True) if y < x)
    base_score = math.fsum(b) / n
    trained_score = math.fsum(t) / n
    binary = all(v in (0.0, 1.0) for v in (*b, *t))
    if binary:
        p_value = mcnemar_exact(wins, losses)
        both = sum(1 for x, y in zip(b, t, strict=True) if x == 1.0 and y == 1.0)
        ci_low, ci_high = newcombe_paired_interval(both, wins, losses, n - both - wins - losses)
        test, interval = MCNEMAR_TEST, NEWCOMBE_CI
    else:
        diffs = [y - x for x, y in zip(b, t, strict=True)]
        p_value = wilcoxon_signed_rank(diffs)
        ci_low, ci_high = bootstrap_mean_interval(diffs)
        test = WILCOXON_TEST
        interval = f"{BOOTSTRAP_CI} ({BOOTSTRAP_RESAMPLES} resamples, seed {BOOTSTRAP_SEED})"
    difference = trained_score - base_score
    short_test = "McNemar exact" if binary else "Wilcoxon signed-rank"
    sentence = (
        f"On {n} {items} {trained_name} scored {trained_score:.2f} against {base_name}'s {base_score:.2f} "
        f"({difference:+.2f}, 95 % CI {ci_low:+.2f} to {ci_high:+.2f}; {short_test} {format_p(p_value)})"
    )
    return PairedComparison(
        n=n,
        base_score=base_score,
        trained_score=trained_score,
        difference=difference,
        ci_low=ci_low,
        ci_high=ci_high,
        p_value=p_value,
        test=test,
        interval=interval,
        binary=binary,
        wins=wins,
        losses=losses,
        ties=n - wins - losses,
        sentence=sentence,
    )


def format_p(p: float) -> str:
    """`p = 0.0123`, or `p < 0.0001` (four decimals say all a reader needs)."""
    return "p < 0.0001" if p < 0.0001 else f"p = {p:.4f}"


def _checked(values: Sequence[float], name: str) -> list[float]:
    out: list[float] = []
    for i, v in enumerate(values):
        if isinstance(v, bool):
            v = float(v)
        if not isinstance(v, int | float) or not math.isfinite(v):
            raise UserError(f"{name} outcome {i} is {v!r}; every outcome must be a finite number (1/0 or a score).")
        out.append(float(v))
    return out


# --- 0/1 outcomes ----------------------------------------------------------------------------
def mcnemar_exact(wins: int, losses: int) -> float:
    """Two-sided exact McNemar p: under the null each flipped item went either way with
    probability 1/2, so p = 2 * P(Binomial(wins + losses, 1/2) <= min(wins, losses)), at most 1."""
    if wins + losses == 0:
        return 1.0
    # Imported when it runs: scipy.stats stays off the server's start-up path (the module's docstring).
    from scipy.stats import binomtest

    return float(binomtest(wins, wins + losses, 0.5).pvalue)


def wilson_interval(successes: int, n: int) -> tuple[float, float]:
    """95 % Wilson score interval of a proportion (n > 0), without continuity correction."""
    # Imported when it runs: scipy.stats stays off the server's start-up path (the module's docstring).
    from scipy.stats import binomtest

    ci = binomtest(successes, n).proportion_ci(CONFIDENCE, method="wilson")
    return float(ci.low), float(ci.high)


def newcombe_paired_interval(both: int, wins: int, losses: int, neither: int) -> tuple[float, float]:
    """95 % interval of trained - base for paired 0/1 outcomes (Newcombe 1998, method 10; scipy has
    no interval of a paired difference, so it is built here on scipy's Wilson intervals).

    both: right for both models; wins: right only for the trained one; losses: right only for
    the base; neither: wrong for both."""
    n = both + wins + losses + neither
    trained_right = both + wins
    base_right = both + losses
    p1, p2 = trained_right / n, base_right / n
    l1, u1 = wilson_interval(trained_right, n)
    l2, u2 = wilson_interval(base_right, n)
    # phi: the correlation of the two outcomes over the 2x2 table, 0 when a margin is empty. A
    # positive cross-product is shrunk by n/2 first (Newcombe's own correction for method 10,
    # as Fagerland, Lydersen & Laake's contingencytables implements it).
    margins = (both + wins) * (losses + neither) * (both + losses) * (wins + neither)
    cross = both * neither - wins * losses
    if margins == 0:
        phi = 0.0
    elif cross > n / 2:
        phi = (cross - n / 2) / math.sqrt(margins)
    elif cross >= 0:
        phi = 0.0
    else:
        phi = cross / math.sqrt(margins)
    delta = p1 - p2
    low = delta - math.sqrt(max(0.0, (p1 - l1) ** 2 - 2 * phi * (p1 - l1) * (u2 - p2) + (u2 - p2) ** 2))
    high = delta + math.sqrt(max(0.0, (u1 - p1) ** 2 - 2 * phi * (u1 - p1) * (p2 - l2) + (p2 - l2) ** 2))
    return max(-1.0, low), min(1.0, high)


# --- graded outcomes -------------------------------------------------------------------------
def wilcoxon_signed_rank(diffs: Sequence[float]) -> float:
    """Two-sided Wilcoxon signed-rank p of paired differences. Zero differences are dropped first
    (Wilcoxon's convention), then scipy's method="auto" decides: the exact null distribution up to
    50 differences without ties, an exact sign-flip permutation test up to 13 with ties, else the
    normal approximation with the tie correction (no continuity correction)."""
    nonzero = [d for d in diffs if d != 0.0]
    if not nonzero:
        return 1.0
    # Imported when it runs: scipy.stats stays off the server's start-up path (the module's docstring).
    from scipy.stats import wilcoxon

    return float(wilcoxon(nonzero, method="auto", correction=False).pvalue)


def _mean(x: Any, axis: int = -1) -> Any:
    # Imported when it runs: numpy comes with scipy, off the server's start-up path like it.
    import numpy as np

    return np.mean(x, axis=axis)


def bootstrap_mean_interval(
    diffs: Sequence[float], *, resamples: int = BOOTSTRAP_RESAMPLES, seed: int = BOOTSTRAP_SEED
) -> tuple[float, float]:
    """95 % percentile interval of the mean paired difference, resampling items with a fixed
    seed (the same outcomes always give the same interval)."""
    if len(diffs) == 1:  # scipy wants two or more; one item's every resample is itself
        return float(diffs[0]), float(diffs[0])
    # Imported when it runs: scipy.stats stays off the server's start-up path (the module's docstring).
    import numpy as np
    from scipy.stats import bootstrap

    ci = bootstrap(
        (list(diffs),),
        _mean,
        n_resamples=resamples,
        confidence_level=CONFIDENCE,
        method="percentile",
        rng=np.random.default_rng(seed),
    ).confidence_interval
    return float(ci.low), float(ci.high)


# --- aggregate-only evaluations ----------------------------------------------------------------
TWO_PROPORTION_TEST = "two-proportion z-test (unpaired, two-sided)"
NEWCOMBE_UNPAIRED_CI = "Newcombe hybrid Wilson score (unpaired, method 10)"


class UnpairedComparison(BaseModel):
    """Base vs trained from two aggregate scores (no per-item outcomes: the items cannot be paired)."""

    model_config = ConfigDict(extra="forbid")

    n: int | None  # items per evaluation (the smaller of the two when they differ); None: unknown
    base_score: float
    trained_score: float
    difference: float
    ci_low: float | None = None  # None: no honest interval (n unknown, or not a proportion)
    ci_high: float | None = None
    p_value: float | None = None
    test: str | None = None
    interval: str | None = None
    sentence: str


def unpaired_comparison(
    base_score: float,
    base_n: int | None,
    trained_score: float,
    trained_n: int | None,
    *,
    items: str = "held-out items",
    trained_name: str = "the trained model",
) -> UnpairedComparison:
    """Two aggregate scores compared as independent proportions: Newcombe's hybrid score interval
    of the difference and the pooled two-proportion z-test. Both need the counts (n) and scores
    in [0, 1]; without them only the difference is given, and the sentence says why. Unpaired
    figures are wider than a paired test's would be on the same items: honest, not optimal."""
    difference = trained_score - base_score
    head = f"{trained_name} scored {trained_score:.2f} against the base's {base_score:.2f} ({difference:+.2f}"
    proportions = all(0.0 <= s <= 1.0 for s in (base_score, trained_score))
    if not base_n or not trained_n or not proportions:
        why = "the environment reported no item count" if proportions else "the scores are not proportions"
        return UnpairedComparison(
            n=min(base_n, trained_n) if base_n and trained_n else None,
            base_score=base_score,
            trained_score=trained_score,
            difference=difference,
            sentence=f"On the environment's own evaluation {head}; no interval or test: {why}, and it reports "
            "no per-item outcomes (pass per-item samples with a score to evaluate_log for the paired test))",
        )
    base_right, trained_right = round(base_score * base_n), round(trained_score * trained_n)
    # Newcombe's hybrid score interval: not in scipy (statsmodels' confint_proportions_2indep with
    # method="newcomb" is, but one interval does not justify that dependency).
    l1, u1 = wilson_interval(trained_right, trained_n)
    l2, u2 = wilson_interval(base_right, base_n)
    p1, p2 = trained_right / trained_n, base_right / base_n
    low = (p1 - p2) - math.sqrt((p1 - l1) ** 2 + (u2 - p2) ** 2)
    high = (p1 - p2) + math.sqrt((u1 - p1) ** 2 + (p2 - l2) ** 2)
    pooled = (base_right + trained_right) / (base_n + trained_n)
    se = math.sqrt(pooled * (1 - pooled) * (1 / base_n + 1 / trained_n))
    p_value = 1.0 if se == 0 else math.erfc(abs(p1 - p2) / se / math.sqrt(2))
    n = min(base_n, trained_n)
    return UnpairedComparison(
        n=n,
        base_score=base_score,
        trained_score=trained_score,
        difference=difference,
        ci_low=max(-1.0, low),
        ci_high=min(1.0, high),
        p_value=p_value,
        test=TWO_PROPORTION_TEST,
        interval=NEWCOMBE_UNPAIRED_CI,
        sentence=f"On {n} {items} {head}, 95 % CI {max(-1.0, low):+.2f} to {min(1.0, high):+.2f}; "
        f"unpaired two-proportion z-test {format_p(p_value)}: the environment reports no per-item outcomes)",
    )


# --- a rise between two windows of steps -------------------------------------------------------
PERMUTATION_TEST = "exact permutation test (one-sided)"
UNPAIRED_BOOTSTRAP_CI = "unpaired bootstrap percentile"
PERMUTATION_EXACT_MAX = 12  # values in both groups: C(12, 6) = 924 splits at most


def permutation_p_greater(before: Sequence[float], after: Sequence[float]) -> float:
    """One-sided exact p that `after` is larger: the share of all splits of the pooled values into
    groups of these sizes whose `after` part sums at least as high as the one observed (ties
    count for the null). For small groups only (a window of a few steps).

    Hand-written, not scipy's permutation_test (the same p; tests/metrics/test_signal.py checks it
    against scipy): rl_check_status runs it on every call, where scipy costs 9-11 ms a call and
    ~1.7 s of CPU to import against 0.06 ms here (measured; design notes)."""
    values = [*_checked(before, "before"), *_checked(after, "after")]
    if not before or not after or len(values) > PERMUTATION_EXACT_MAX:
        raise ValueError(
            f"permutation_p_greater takes 1 to {PERMUTATION_EXACT_MAX} values in all, both sides non-empty"
        )
    observed = math.fsum(after) - 1e-12
    splits = list(itertools.combinations(values, len(after)))
    return sum(1 for split in splits if math.fsum(split) >= observed) / len(splits)


def bootstrap_difference_interval(
    before: Sequence[float], after: Sequence[float], *, resamples: int = BOOTSTRAP_RESAMPLES, seed: int = BOOTSTRAP_SEED
) -> tuple[float, float]:
    """95 % percentile interval of mean(after) - mean(before), each group resampled on its own
    with a fixed seed. Hand-written for the same reason as permutation_p_greater (the status
    path); the test checks it against scipy's bootstrap within resampling noise."""
    rng = random.Random(seed)
    a, b = list(after), list(before)
    diffs = sorted(
        math.fsum(rng.choices(a, k=len(a))) / len(a) - math.fsum(rng.choices(b, k=len(b))) / len(b)
        for _ in range(resamples)
    )
    alpha = (1 - CONFIDENCE) / 2
    return _quantile(diffs, alpha), _quantile(diffs, 1 - alpha)


def _quantile(sorted_values: list[float], q: float) -> float:
    pos = q * (len(sorted_values) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)
