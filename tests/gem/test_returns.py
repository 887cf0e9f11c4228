"""Discounted returns and ReBN against hand-worked examples."""

from __future__ import annotations

import math
import random

import pytest

from mcp_rl.environments.gem_returns import (
    choose_transitions,
    discounted_returns,
    episode_success,
    kl_sample_train,
    normalize_returns,
    token_entropy_estimate,
    training_rewards,
)


def test_discounted_returns_hand_worked():
    # Guess the number won on turn 3: rewards 0, 0, 1 with gamma 0.9.
    # G2 = 1; G1 = 0 + 0.9*1 = 0.9; G0 = 0 + 0.9*0.9 = 0.81.
    assert discounted_returns([0.0, 0.0, 1.0], 0.9) == pytest.approx([0.81, 0.9, 1.0])
    # Format error on turn 2 (-0.1) after a hint (0): G1 = -0.1, G0 = 0.9 * -0.1 = -0.09.
    assert discounted_returns([0.0, -0.1], 0.9) == pytest.approx([-0.09, -0.1])
    # Intermediate rewards add up: rewards 1, 2, 3 with gamma 0.5: G2 = 3, G1 = 2 + 1.5 = 3.5,
    # G0 = 1 + 0.5 * 3.5 = 2.75.
    assert discounted_returns([1, 2, 3], 0.5) == pytest.approx([2.75, 3.5, 3.0])


def test_discount_edges():
    assert discounted_returns([], 0.9) == []
    assert discounted_returns([0.0, 0.0, 1.0], 1.0) == [1.0, 1.0, 1.0]  # undiscounted
    assert discounted_returns([5.0, 0.0, 1.0], 0.0) == [5.0, 0.0, 1.0]  # myopic
    with pytest.raises(ValueError):
        discounted_returns([1.0], 1.5)


def test_rebn_hand_worked():
    # Returns 0.81, 0.9, 1.0, -0.1: mean 0.6525; deviations 0.1575, 0.2475, 0.3475, -0.7525;
    # sum of squares 0.0248063 + 0.0612563 + 0.1207563 + 0.5662563 = 0.773075;
    # sample variance 0.773075 / 3 = 0.2576917, std 0.5076334.
    out = normalize_returns([0.81, 0.9, 1.0, -0.1])
    expected = [d / 0.5076334 for d in (0.1575, 0.2475, 0.3475, -0.7525)]
    assert out == pytest.approx(expected, rel=1e-5)
    assert sum(out) == pytest.approx(0.0, abs=1e-9)
    # Two values a, b normalise to -/+ 1/sqrt(2) (sample std = |a - b| / sqrt(2)).
    assert normalize_returns([0.0, 1.0]) == pytest.approx([-1 / math.sqrt(2), 1 / math.sqrt(2)])


def test_rebn_degenerate_cases_give_no_signal():
    assert normalize_returns([]) == []
    assert normalize_returns([0.7]) == [0.0]
    assert normalize_returns([0.3, 0.3, 0.3]) == [0.0, 0.0, 0.0]


def test_success_is_the_winning_reward_on_the_last_turn():
    assert episode_success([0.0, 0.0, 1.0], 1.0)
    # Partial credit at the turn limit (1 - distance/range) is not a win.
    assert not episode_success([0.0, 0.0, 0.0, 0.89], 1.0)
    assert not episode_success([-0.1], 1.0)
    assert not episode_success([], 1.0)


def test_without_partial_credit_only_wins_and_penalties_pay():
    # GuessTheNumber lost at the turn limit 2 away from a target in 1..10: 1 - 2/9 = 0.778.
    near_miss = [0.0, 0.0, 0.0, 1 - 2 / 9]
    assert training_rewards(near_miss, 1.0, partial_credit=True) == pytest.approx(near_miss)
    assert training_rewards(near_miss, 1.0, partial_credit=False) == [0.0, 0.0, 0.0, 0.0]
    # A win and a format-error penalty are kept as GEM gives them.
    assert training_rewards([0.0, 1.0], 1.0, partial_credit=False) == [0.0, 1.0]
    assert training_rewards([0.0, -0.1], 1.0, partial_credit=False) == [0.0, -0.1]
    # Hand-worked returns (gamma 0.9) of the near miss: with credit G0 = 0.9^3 * 0.778 = 0.567;
    # without, no signal at all.
    assert discounted_returns(training_rewards(near_miss, 1.0, True), 0.9)[0] == pytest.approx(0.729 * (1 - 2 / 9))
    assert discounted_returns(training_rewards(near_miss, 1.0, False), 0.9) == [0.0] * 4


def test_choose_transitions_keeps_order_and_count():
    rng = random.Random(0)
    assert choose_transitions(5, 8, rng) == [0, 1, 2, 3, 4]
    picked = choose_transitions(20, 8, rng)
    assert len(picked) == 8 and picked == sorted(set(picked)) and all(0 <= i < 20 for i in picked)


def test_entropy_and_kl_estimates():
    assert token_entropy_estimate([-0.5, -1.5]) == pytest.approx(1.0)
    assert token_entropy_estimate([]) == 0.0
    # diffs 0.1 and -0.3: v1 = -0.1, v2 = 0.5 * (0.01 + 0.09) / 2 = 0.025.
    v1, v2 = kl_sample_train([-1.0, -2.0], [-1.1, -1.7])
    assert v1 == pytest.approx(-0.1) and v2 == pytest.approx(0.025)
    with pytest.raises(ValueError):
        kl_sample_train([-1.0], [])
