"""Returns and advantages of multi-turn GEM episodes, as pure functions (no gem, no torch).

The recipe (GEM's Tinker example): every turn of an episode is one transition (observation ->
action -> reward); its return is the discounted sum of the rewards from that turn on,
`G_t = r_t + gamma * G_{t+1}`; optionally the returns of all transitions trained together are
normalised to zero mean and unit standard deviation ("ReBN", return batch normalisation, done by
the trainer over the step's whole batch: trainer/advantages.rebn); the (normalised) return is the
advantage of every action token of the transition.
"""

from __future__ import annotations

from collections.abc import Sequence


def discounted_returns(rewards: Sequence[float], gamma: float) -> list[float]:
    """`G_t = r_t + gamma * G_{t+1}` for every turn of one episode (G after the last turn is 0)."""
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"gamma must be in [0, 1], got {gamma}")
    returns = [0.0] * len(rewards)
    running = 0.0
    for t in range(len(rewards) - 1, -1, -1):
        running = float(rewards[t]) + gamma * running
        returns[t] = running
    return returns


def training_rewards(rewards: Sequence[float], success_reward: float, partial_credit: bool) -> list[float]:
    """The per-turn rewards the returns are computed from. With `partial_credit` off, a positive
    reward short of a win (GuessTheNumber pays `1 - distance / range` at the turn limit) counts
    as 0, so a safe near-miss stops paying almost as well as winning; wins and penalties (format
    errors, -0.1) are kept as GEM gives them."""
    if partial_credit:
        return [float(r) for r in rewards]
    return [float(r) if r >= success_reward or r < 0 else 0.0 for r in rewards]


def episode_success(rewards: Sequence[float], success_reward: float) -> bool:
    """GEM games give `success_reward` (1.0) on the winning move and end the episode there."""
    return bool(rewards) and float(rewards[-1]) >= success_reward


def token_entropy_estimate(sampled_logprobs: Sequence[float]) -> float:
    """Monte-Carlo estimate of the policy's per-token entropy: `-mean(log p(sampled token))`."""
    if not sampled_logprobs:
        return 0.0
    return -sum(sampled_logprobs) / len(sampled_logprobs)
