"""Advantages and example building: hand-worked cases."""

from __future__ import annotations

import math

import pytest

from mcp_rl.trainer.advantages import MASKED, build_examples, group_advantages, sequence_example


def test_group_advantages_are_centred_and_scaled() -> None:
    adv = group_advantages([1.0, 0.0, 0.0, 1.0])
    assert adv == pytest.approx([1.0, -1.0, -1.0, 1.0], abs=1e-5)
    assert group_advantages([1.0, 0.0, 0.0, 0.0], normalize_std=False) == pytest.approx([0.75, -0.25, -0.25, -0.25])


def test_equal_scores_give_no_signal() -> None:
    assert group_advantages([0.5, 0.5, 0.5]) == [0.0, 0.0, 0.0]
    assert group_advantages([]) == []


def test_sequence_example_shifts_and_masks_the_prompt() -> None:
    tokens = [10, 11, 12, 20, 21]
    mask = [MASKED, MASKED, MASKED, 20, 21]
    logprobs = [1.0, 1.0, 1.0, -0.5, -0.25]
    ex = sequence_example(tokens, mask, 2.0, logprobs)
    assert ex.input_tokens == [10, 11, 12, 20]
    assert ex.target_tokens == [11, 12, 20, 21]
    assert ex.trained == [False, False, True, True]
    assert ex.advantages == [0.0, 0.0, 2.0, 2.0]
    # The prompt's placeholder 1.0 never reaches the loss; completion logprobs line up with targets.
    assert ex.sampling_logprobs == [0.0, 0.0, -0.5, -0.25]


def test_per_token_advantages_are_used_as_given() -> None:
    tokens = [1, 2, 3, 4]
    mask = [MASKED, 2, MASKED, 4]
    ex = sequence_example(tokens, mask, [9.0, 0.5, 7.0, -1.5])
    assert ex.advantages == [0.5, 0.0, -1.5]
    assert ex.trained == [True, False, True]
    assert ex.sampling_logprobs is None


def test_mismatched_lengths_are_refused() -> None:
    with pytest.raises(ValueError):
        sequence_example([1, 2, 3], [MASKED, 2], 1.0)
    with pytest.raises(ValueError):
        sequence_example([1, 2, 3], [MASKED, 2, 3], [1.0, 2.0])
    with pytest.raises(ValueError):
        sequence_example([1], [1], 1.0)


def test_logprobs_of_the_wrong_length_are_ignored_not_misaligned() -> None:
    ex = sequence_example([1, 2, 3], [MASKED, 2, 3], 1.0, [1.0, -0.1])
    assert ex.sampling_logprobs is None


def test_truncation_to_max_length() -> None:
    ex = sequence_example(list(range(10)), [MASKED] * 2 + list(range(2, 10)), 1.0, [0.0] * 10, max_length=4)
    assert len(ex.input_tokens) == 4 and ex.target_tokens == [1, 2, 3, 4]
    assert ex.sampling_logprobs is not None and len(ex.sampling_logprobs) == 4


def _group(scores: list[float], advantages: list[list[float]] | None = None) -> dict:
    n = len(scores)
    group = {
        "tokens": [[5, 6, 7, 8 + i] for i in range(n)],
        "masks": [[MASKED, MASKED, 7, 8 + i] for i in range(n)],
        "scores": scores,
        "inference_logprobs": [[1.0, 1.0, -0.2, -0.4] for _ in range(n)],
    }
    if advantages is not None:
        group["advantages"] = advantages
    return group


def test_build_examples_group_relative_and_stats() -> None:
    examples, stats = build_examples([_group([1.0, 0.0]), _group([0.0, 0.0])])
    assert len(examples) == 4
    assert examples[0].advantages == pytest.approx([0.0, 1.0, 1.0], abs=1e-5)
    assert examples[1].advantages == pytest.approx([0.0, -1.0, -1.0], abs=1e-5)
    assert examples[2].advantages == [0.0, 0.0, 0.0]
    assert stats.reward_mean == pytest.approx(0.25)  # mean of the group means 0.5 and 0.0
    assert stats.zero_signal_groups == 1
    assert stats.groups == 2 and stats.sequences == 4
    assert stats.tokens == 16 and stats.trained_tokens == 8
    assert stats.advantages_mean == pytest.approx(0.0, abs=1e-5)
    assert stats.advantages_std == pytest.approx(math.sqrt(0.5), abs=1e-4)


def test_build_examples_honours_group_advantages() -> None:
    given = [[0.0, 0.0, 3.0, 3.0], [0.0, 0.0, -2.0, -2.0]]
    examples, stats = build_examples([_group([0.0, 0.0], advantages=given)])
    assert examples[0].advantages == [0.0, 3.0, 3.0]
    assert examples[1].advantages == [0.0, -2.0, -2.0]
    # Scores are equal, but the environment's own advantages carry the signal.
    assert stats.zero_signal_groups == 0
    assert stats.per_token_advantages_groups == 1


def test_build_examples_rejects_ragged_groups() -> None:
    bad = _group([1.0, 0.0])
    bad["scores"] = [1.0]
    with pytest.raises(ValueError):
        build_examples([bad])


# --- issue 27: what the environment asked for ----------------------------------------------------
def _reference_atropos_example_trainer(group: dict) -> list[float]:
    """Atropos' example trainer (example_trainer/data.py): scores centred and divided by their std
    (floor 1e-8), then `set_advantage_to_zero` overrides set to 0."""
    scores = [float(s) for s in group["scores"]]
    mean = sum(scores) / len(scores)
    std = math.sqrt(sum((s - mean) ** 2 for s in scores) / len(scores))
    out = [(s - mean) / max(std, 1e-8) for s in scores]
    for i, o in enumerate(group.get("overrides") or []):
        if o.get("set_advantage_to_zero", False):
            out[i] = 0.0
    return out


def test_set_advantage_to_zero_overrides_match_atropos_example_trainer() -> None:
    group = _group([1.0, 0.0, 0.0, 1.0])
    group["overrides"] = [{}, {"set_advantage_to_zero": True}, {}, {}]
    examples, stats = build_examples([group])
    expected = _reference_atropos_example_trainer(group)
    assert [e.advantages[-1] for e in examples] == pytest.approx(expected, abs=1e-5)
    assert examples[1].advantages == [0.0, 0.0, 0.0]
    assert stats.zeroed_sequences == 1


def test_group_overrides_zero_a_whole_group() -> None:
    group = _group([1.0, 0.0])
    group["group_overrides"] = {"set_advantage_to_zero": True}
    examples, stats = build_examples([group, _group([0.0, 1.0])])
    assert examples[0].advantages == examples[1].advantages == [0.0, 0.0, 0.0]
    assert examples[2].advantages[-1] == pytest.approx(-1.0, abs=1e-5)
    assert stats.zeroed_sequences == 2


def test_zero_advantage_and_untrained_examples_are_not_trained_but_counted() -> None:
    from mcp_rl.trainer.advantages import select_trained

    overridden = _group([1.0, 0.0])
    overridden["overrides"] = [{"set_advantage_to_zero": True}, {}]
    empty = _group([1.0, 0.0])
    empty["masks"] = [[MASKED] * 4, [MASKED, MASKED, 7, 9]]
    examples, stats = build_examples([_group([1.0, 1.0]), overridden, empty])
    chosen = select_trained(examples)
    # All-equal group (2), overridden sequence (1) out; sequence 4 of `overridden` and the masked one
    # of `empty` stay... except the fully masked one, which has no trained token.
    assert chosen.zero_advantage == 3 and chosen.no_trained_token == 1
    assert len(chosen.examples) == 2
    assert all(any(a != 0.0 for a in e.advantages) for e in chosen.examples)
    assert stats.sequences == 6 and stats.zero_signal_groups == 1


def test_mean_center_only_centres_and_group_std_scales() -> None:
    group = _group([1.0, 0.0, 0.0, 0.0])
    centred, _ = build_examples([group], normalization="mean_center")
    scaled, _ = build_examples([group], normalization="group_std")
    assert [e.advantages[-1] for e in centred] == pytest.approx([0.75, -0.25, -0.25, -0.25])
    std = math.sqrt(0.75 * 0.25)
    assert [e.advantages[-1] for e in scaled] == pytest.approx(
        [0.75 / std, -0.25 / std, -0.25 / std, -0.25 / std], abs=1e-4
    )
    with pytest.raises(ValueError, match="advantage_normalization"):
        build_examples([group], normalization="rank")


def _reference_rebn(returns: list[float]) -> list[float]:
    """The seed's ReBN (tinker_train_gem): torch `(r - r.mean()) / (r.std() + 1e-9)` over every
    transition of the step (std with Bessel's correction)."""
    import numpy as np

    r = np.array(returns, dtype=np.float64)
    return list((r - r.mean()) / (r.std(ddof=1) + 1e-9))


def test_rebn_runs_over_the_whole_batch_not_per_group() -> None:
    from mcp_rl.trainer.advantages import REBN_OVER_BATCH

    won = _group([0.9, 0.81, 1.0, 0.729])
    lost = _group([0.0, -0.1, 0.0, 0.0])
    for g in (won, lost):
        g["advantages"] = [[0.0, 0.0, s, s] for s in g["scores"]]  # raw returns, as GemEnv sends them
        g["group_overrides"] = {REBN_OVER_BATCH: True}
    examples, stats = build_examples([won, lost])
    expected = _reference_rebn(won["scores"] + lost["scores"])
    assert [e.advantages[-1] for e in examples] == pytest.approx(expected, abs=1e-9)
    # A group of lost episodes stays below the won ones (per group it would get +-1 scale values).
    assert max(e.advantages[-1] for e in examples[4:]) < min(e.advantages[-1] for e in examples[:4])
    assert stats.rebn_sequences == 8


def test_a_non_finite_score_is_refused_naming_the_group_and_sequence() -> None:
    bad = _group([1.0, float("nan")])
    with pytest.raises(ValueError, match="group 1 of the batch: sequence 1 has a non-finite score"):
        build_examples([_group([1.0, 0.0]), bad])
