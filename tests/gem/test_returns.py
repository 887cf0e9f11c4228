"""Discounted returns, rewards and success against hand-worked examples."""

from __future__ import annotations

import pytest

from mcp_rl.environments.gem_returns import (
    discounted_returns,
    episode_success,
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


def test_entropy_estimate():
    assert token_entropy_estimate([-0.5, -1.5]) == pytest.approx(1.0)
    assert token_entropy_estimate([]) == 0.0
