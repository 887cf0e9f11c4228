"""What a step trains, and what the trainer refuses or ignores in words (issue 27)."""

from __future__ import annotations

import logging

import pytest

from mcp_rl.scored_data import MASKED
from mcp_rl.trainer.step_data import Notices, RefusedBatch, prepare_step


def _group(scores: list[float], **extra) -> dict:
    n = len(scores)
    return {
        "tokens": [[5, 6, 7, 8 + i] for i in range(n)],
        "masks": [[MASKED, MASKED, 7, 8 + i] for i in range(n)],
        "scores": scores,
        **extra,
    }


def _prepare(batch, **kwargs):
    return prepare_step(batch, max_length=None, normalization="group_std", notices=Notices(), **kwargs)


def test_a_group_sampled_at_another_temperature_is_refused_in_words() -> None:
    with pytest.raises(RefusedBatch, match="environment 'gem' sampled a training group at temperature 0.7"):
        _prepare([_group([1.0, 0.0], generation_params={"temperature": 0.7})], environment="environment 'gem'")
    with pytest.raises(RefusedBatch, match="temperature 1.3"):
        _prepare([_group([1.0, 0.0], overrides=[{}, {"temperature": 1.3}])])
    assert _prepare([_group([1.0, 0.0], generation_params={"temperature": 1.0})]).trained


def test_ref_logprobs_are_said_to_be_ignored_once(caplog: pytest.LogCaptureFixture) -> None:
    notices = Notices()
    batch = [_group([1.0, 0.0], ref_logprobs=[[-0.1] * 4, [-0.2] * 4])]
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            prepare_step(batch, max_length=None, normalization="group_std", notices=notices)
    said = [r.getMessage() for r in caplog.records if "ref_logprobs" in r.getMessage()]
    assert len(said) == 1 and "without a KL term" in said[0]


def test_a_non_finite_score_names_the_environment() -> None:
    with pytest.raises(RefusedBatch, match=r"environment 'x' sent a batch .* group 0 of the batch: sequence 1"):
        _prepare([_group([1.0, float("inf")])], environment="environment 'x'")


def test_stale_sequences_are_not_trained_but_counted() -> None:
    prepared = _prepare([_group([1.0, 0.0]), _group([0.0, 1.0])], lags=[0, 1, 2, None], max_lag=1)
    assert len(prepared.trained) == 3
    assert prepared.metrics["policy_lag/stale_sequences"] == 1
    assert prepared.metrics["policy_lag/max"] == 2 and prepared.metrics["policy_lag/unknown_sequences"] == 1
    assert prepared.stats.sequences == 4


def test_reward_mean_says_when_it_covers_mixed_groups_only() -> None:
    batch = [_group([1.0, 0.0])]
    assert _prepare(batch, mixed_groups_only=True).metrics["reward/mixed_groups_only"] == 1.0
    assert _prepare(batch).metrics["reward/mixed_groups_only"] == 0.0
