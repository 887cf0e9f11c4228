"""From an Atropos batch to training examples: advantages, masks, alignment. Pure functions.

A batch is a list of ScoredData groups (`tokens`, `masks`, `scores`, optionally `advantages`
and `inference_logprobs`, all per sequence and aligned with `tokens`). Masks use -100 for tokens
that are not trained on (the prompt). The model predicts token t+1 from tokens[:t+1], so every
per-token list is shifted by one to line up with its target.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from mcp_rl.scored_data import MASKED
from mcp_rl.trainer.backends.base import TrainingExample


def group_advantages(scores: list[float], *, normalize_std: bool = True, eps: float = 1e-6) -> list[float]:
    """GRPO advantages: score minus the group mean, divided by the group std when asked.

    A group whose scores are all equal has no signal: every advantage is 0.
    """
    if not scores:
        return []
    mean = sum(scores) / len(scores)
    centred = [s - mean for s in scores]
    if not normalize_std:
        return centred
    std = math.sqrt(sum(c * c for c in centred) / len(centred))
    if std < eps:
        return [0.0 for _ in centred]
    return [c / (std + eps) for c in centred]


def sequence_example(
    tokens: list[int],
    mask: list[int],
    advantage: float | list[float],
    inference_logprobs: list[float] | None = None,
    max_length: int | None = None,
) -> TrainingExample:
    """One sequence -> inputs tokens[:-1], targets tokens[1:], per-target advantages.

    `advantage` is one number for the whole completion or one per token of `tokens` (the
    per-token advantages of a multi-turn environment). Masked targets get advantage 0.
    """
    if len(mask) != len(tokens):
        raise ValueError(f"mask has {len(mask)} entries for {len(tokens)} tokens")
    if len(tokens) < 2:
        raise ValueError("a sequence needs at least two tokens")
    if isinstance(advantage, list):
        if len(advantage) != len(tokens):
            raise ValueError(f"advantages has {len(advantage)} entries for {len(tokens)} tokens")
        per_token = [float(a) for a in advantage]
    else:
        per_token = [float(advantage)] * len(tokens)
    if max_length is not None and len(tokens) > max_length + 1:
        tokens, mask, per_token = tokens[: max_length + 1], mask[: max_length + 1], per_token[: max_length + 1]
        if inference_logprobs is not None:
            inference_logprobs = inference_logprobs[: max_length + 1]
    trained = [m != MASKED for m in mask[1:]]
    advantages = [a if t else 0.0 for a, t in zip(per_token[1:], trained, strict=True)]
    sampling = None
    if inference_logprobs is not None and len(inference_logprobs) == len(tokens):
        # Prompt positions carry a placeholder (1.0 from ManagedServer); they are never trained.
        sampling = [float(lp) if t else 0.0 for lp, t in zip(inference_logprobs[1:], trained, strict=True)]
    return TrainingExample(
        input_tokens=list(tokens[:-1]),
        target_tokens=list(tokens[1:]),
        advantages=advantages,
        sampling_logprobs=sampling,
        trained=trained,
    )


@dataclass(frozen=True)
class BatchStats:
    """What the metrics line says about the batch itself (before training)."""

    reward_mean: float
    reward_std: float
    reward_min: float
    reward_max: float
    groups: int
    sequences: int
    zero_signal_groups: int
    tokens: int
    trained_tokens: int
    advantages_mean: float
    advantages_std: float
    per_token_advantages_groups: int


def _mean_std(values: list[float]) -> tuple[float, float]:
    if not values:
        return 0.0, 0.0
    mean = sum(values) / len(values)
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))


def build_examples(
    batch: list[dict[str, Any]],
    *,
    max_length: int | None = None,
    normalize_std: bool = True,
) -> tuple[list[TrainingExample], BatchStats]:
    """Training examples for every sequence of every group, and the batch's statistics.

    Groups that carry `advantages` use them as given; the others get group-relative ones.
    """
    examples: list[TrainingExample] = []
    group_means: list[float] = []
    all_scores: list[float] = []
    zero_signal = 0
    per_token_groups = 0
    total_tokens = 0
    for group in batch:
        tokens_G = group["tokens"]
        masks_G = group["masks"]
        scores_G = [float(s) for s in group["scores"]]
        if not (len(tokens_G) == len(masks_G) == len(scores_G)):
            raise ValueError("a group's tokens, masks and scores must have one entry per sequence")
        given = group.get("advantages")
        logprobs_G = group.get("inference_logprobs") or [None] * len(tokens_G)
        if len(logprobs_G) != len(tokens_G):
            logprobs_G = [None] * len(tokens_G)
        if given is not None:
            if len(given) != len(tokens_G):
                raise ValueError("a group's advantages must have one entry per sequence")
            per_token_groups += 1
            advantages_G: list[float | list[float]] = list(given)
        else:
            advantages_G = list(group_advantages(scores_G, normalize_std=normalize_std))
            if all(a == 0.0 for a in advantages_G):
                zero_signal += 1
        group_means.append(sum(scores_G) / len(scores_G) if scores_G else 0.0)
        all_scores.extend(scores_G)
        for tokens, mask, adv, lps in zip(tokens_G, masks_G, advantages_G, logprobs_G, strict=True):
            total_tokens += len(tokens)
            examples.append(sequence_example(list(tokens), list(mask), adv, lps, max_length))
    trained_adv = [a for e in examples for a, m in zip(e.advantages, e.trained, strict=True) if m]
    adv_mean, adv_std = _mean_std(trained_adv)
    _, reward_std = _mean_std(all_scores)
    stats = BatchStats(
        reward_mean=sum(group_means) / len(group_means) if group_means else 0.0,
        reward_std=reward_std,
        reward_min=min(all_scores) if all_scores else 0.0,
        reward_max=max(all_scores) if all_scores else 0.0,
        groups=len(batch),
        sequences=len(examples),
        zero_signal_groups=zero_signal,
        tokens=total_tokens,
        trained_tokens=len(trained_adv),
        advantages_mean=adv_mean,
        advantages_std=adv_std,
        per_token_advantages_groups=per_token_groups,
    )
    return examples, stats
