"""The statistics against published values, hand-computed cases and scipy (the tests, the Wilson
intervals and the bootstraps are scipy's; Newcombe's intervals and the z-test are ours)."""

from __future__ import annotations

import itertools
import math

import pytest

from mcp_rl.errors import UserError
from mcp_rl.proof.stats import (
    MCNEMAR_TEST,
    WILCOXON_TEST,
    bootstrap_mean_interval,
    format_p,
    mcnemar_exact,
    newcombe_paired_interval,
    paired_comparison,
    unpaired_comparison,
    wilcoxon_signed_rank,
    wilson_interval,
)


def _table(both: int, wins: int, losses: int, neither: int) -> tuple[list[float], list[float]]:
    """Per-item outcomes (base, trained) of a paired 2x2 table."""
    base = [1.0] * both + [0.0] * wins + [1.0] * losses + [0.0] * neither
    trained = [1.0] * both + [1.0] * wins + [0.0] * losses + [0.0] * neither
    return base, trained


def test_wilson_interval_known_values() -> None:
    # 0 of 10: the upper limit is z^2 / (n + z^2).
    low, high = wilson_interval(0, 10)
    assert low == 0.0
    assert high == pytest.approx(1.959963984540054**2 / (10 + 1.959963984540054**2))
    assert wilson_interval(1, 10) == pytest.approx((0.017876, 0.404150), abs=1e-6)


def test_newcombe_paired_interval_matches_contingencytables() -> None:
    # Cavo et al. 2012 (Fagerland, Lydersen & Laake, ch. 8): table [[59, 6], [16, 80]],
    # published Newcombe square-and-add: -0.0621 (95 % CI -0.1186 to -0.0046).
    low, high = newcombe_paired_interval(59, 6, 16, 80)
    assert (low, high) == pytest.approx((-0.1186, -0.0046), abs=5e-5)


def test_newcombe_unpaired_interval_and_z_test() -> None:
    # Newcombe 1998 (Stat Med 17:873), example (a): 56/70 vs 48/80, method 10: 0.0524 to 0.3339.
    result = unpaired_comparison(48 / 80, 80, 56 / 70, 70)
    assert (result.ci_low, result.ci_high) == pytest.approx((0.0524, 0.3339), abs=5e-5)
    # The pooled z-test is the uncorrected chi-square test of the 2x2 table (z^2 = chi^2).
    from scipy.stats import chi2_contingency

    assert result.p_value == pytest.approx(chi2_contingency([[56, 14], [48, 32]], correction=False).pvalue)


def test_mcnemar_exact_known_values() -> None:
    # Same table: exact conditional McNemar P = 0.052479 (6 vs 16 flipped).
    assert mcnemar_exact(6, 16) == pytest.approx(0.052479, abs=1e-6)
    assert mcnemar_exact(16, 6) == mcnemar_exact(6, 16)
    # All 10 flips one way: 2 / 2^10.
    assert mcnemar_exact(10, 0) == pytest.approx(2 / 1024)
    assert mcnemar_exact(0, 0) == 1.0
    assert mcnemar_exact(5, 5) == 1.0
    # Thousands of flips do not underflow.
    assert 0.0 < mcnemar_exact(1100, 1000) < 0.05


def test_wilcoxon_exact_known_values() -> None:
    # All five differences positive: the most extreme of 2^5 sign patterns, both tails.
    assert wilcoxon_signed_rank([1, 2, 3, 4, 5]) == pytest.approx(2 / 32)
    # scipy.stats.wilcoxon's documented example: statistic 24, exact p = 0.041259765625.
    d = [6, 8, 14, 16, 23, 24, 28, 29, 41, -48, 49, 56, 60, -67, 75]
    assert wilcoxon_signed_rank(d) == pytest.approx(0.041259765625, abs=1e-12)
    assert wilcoxon_signed_rank([0.0, 0.0]) == 1.0


def test_wilcoxon_with_ties_on_few_items_counts_every_sign_flip() -> None:
    # The zero dropped, 6 differences with tied |d|: exact over all 2^6 signs of the average ranks.
    diffs = [0.0, 1.0, 1.0, 2.0, -3.0, 4.0, 4.0]
    ranks = [1.5, 1.5, 3.0, 4.0, 5.5, 5.5]
    observed = 1.5 + 1.5 + 3.0 + 5.5 + 5.5  # W+: every rank but the -3's
    total = sum(ranks)
    flips = [sum(r for r, up in zip(ranks, signs, strict=True) if up) for signs in itertools.product((0, 1), repeat=6)]
    extreme = sum(1 for w in flips if abs(w - total / 2) >= abs(observed - total / 2) - 1e-9)
    assert wilcoxon_signed_rank(diffs) == pytest.approx(extreme / 64)


def test_wilcoxon_normal_approximation_with_ties() -> None:
    # 30 of +1 and 10 of -1: every rank ties at 20.5, W- = 205, mean 410,
    # var = 40*41*81/24 - (40^3 - 40)/48 = 4202.5, z = -205/sqrt(4202.5).
    diffs = [1.0] * 30 + [-1.0] * 10
    z = 205 / math.sqrt(4202.5)
    assert wilcoxon_signed_rank(diffs) == pytest.approx(math.erfc(z / math.sqrt(2)), rel=1e-12)


def test_binary_outcomes_use_mcnemar_and_newcombe() -> None:
    base, trained = _table(59, 6, 16, 80)
    result = paired_comparison(base, trained)
    assert result.test == MCNEMAR_TEST
    assert result.binary
    assert result.n == 161
    assert (result.wins, result.losses, result.ties) == (6, 16, 139)
    assert result.trained_score == pytest.approx(65 / 161)
    assert result.base_score == pytest.approx(75 / 161)
    assert result.difference == pytest.approx(-10 / 161)
    assert (result.ci_low, result.ci_high) == pytest.approx((-0.1186, -0.0046), abs=5e-5)
    assert result.p_value == pytest.approx(0.052479, abs=1e-6)
    assert result.sentence == (
        "On 161 held-out items the trained model scored 0.40 against the base's 0.47 "
        "(-0.06, 95 % CI -0.12 to -0.00; McNemar exact p = 0.0525)"
    )


def test_a_clear_gain_is_significant_and_its_interval_excludes_zero() -> None:
    base, trained = _table(60, 50, 8, 82)
    result = paired_comparison(base, trained)
    assert result.p_value < 1e-6
    assert 0 < result.ci_low < result.difference < result.ci_high
    assert "p < 0.0001" in result.sentence


def test_graded_outcomes_use_wilcoxon_and_a_seeded_bootstrap() -> None:
    base = [0.1 * (i % 7) for i in range(60)]
    trained = [b + (0.05 if i % 3 else -0.02) + 0.001 * i for i, b in enumerate(base)]
    first = paired_comparison(base, trained, items="test problems", base_name="gpt-x", trained_name="run:abc")
    again = paired_comparison(base, trained)
    assert first.test == WILCOXON_TEST
    assert not first.binary
    assert "seed 0" in first.interval
    # Fixed seed: the same outcomes give the same interval every time.
    assert (first.ci_low, first.ci_high) == (again.ci_low, again.ci_high)
    assert first.ci_low < first.difference < first.ci_high
    assert first.sentence.startswith("On 60 test problems run:abc scored ")
    assert "against gpt-x's " in first.sentence


def test_bootstrap_interval_of_a_constant_difference_is_that_difference() -> None:
    assert bootstrap_mean_interval([0.25] * 20) == pytest.approx((0.25, 0.25))
    assert bootstrap_mean_interval([0.3]) == (0.3, 0.3)  # one item: scipy's bootstrap needs two


@pytest.mark.parametrize(
    ("base", "trained", "words"),
    [
        ([], [], "no items"),
        ([1.0, 0.0], [1.0], "2 base and 1 trained"),
        ([1.0, float("nan")], [1.0, 0.0], "finite"),
        ([1.0, 0.0], [float("inf"), 0.0], "finite"),
        ([1.0, "1"], [1.0, 0.0], "finite"),
    ],
)
def test_bad_input_is_refused(base: list[float], trained: list[float], words: str) -> None:
    with pytest.raises(UserError, match=words):
        paired_comparison(base, trained)


def test_format_p() -> None:
    assert format_p(0.00001) == "p < 0.0001"
    assert format_p(0.0123) == "p = 0.0123"
    assert format_p(1.0) == "p = 1.0000"
