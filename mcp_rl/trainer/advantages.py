"""From an Atropos batch to training examples: advantages, masks, alignment. Pure functions.

A batch is a list of ScoredData groups (`tokens`, `masks`, `scores`, optionally `advantages`
and `inference_logprobs`, all per sequence and aligned with `tokens`). Masks use -100 for tokens
that are not trained on (the prompt). The model predicts token t+1 from tokens[:t+1], so every
per-token list is shifted by one to line up with its target.

What an environment asks for beyond scores is honoured here, as Atropos' example trainer does:
`overrides[i]["set_advantage_to_zero"]` (upstream environments set it for truncated answers) and
`group_overrides["set_advantage_to_zero"]` zero a sequence's (a group's) advantage after the
group's normalisation; `group_overrides[REBN_OVER_BATCH]` (GemEnv) asks for the sequences'
scores (discounted returns) to be normalised over every such sequence of the step's batch, the
GEM recipe's ReBN. `ref_logprobs` (a KL penalty) and a sampling temperature other than 1 are
not trained on: `unsupported_fields` names them so the trainer can say so.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Any

from mcp_rl.scored_data import MASKED, REBN_OVER_BATCH
from mcp_rl.trainer.backends.base import TrainingExample

# The recipe's ReBN: `(G - mean) / (std + 1e-9)`, std with Bessel's correction (torch's default).
REBN_EPS = 1e-9
ZERO_OVERRIDE = "set_advantage_to_zero"
NORMALIZATIONS = ("group_std", "mean_center")


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
    # Sequences whose advantage an environment's override set to zero.
    zeroed_sequences: int = 0
    # Sequences whose returns were normalised over the batch (ReBN, GemEnv).
    rebn_sequences: int = 0
    # Mean completion length in tokens (the trained, unmasked tokens of each sequence): the
    # learning-signal monitors watch it drift up while the held-out score stays flat.
    completion_tokens_mean: float = 0.0
    # Groups of two or more sequences whose completions are all the same tokens (the group has
    # collapsed to one answer: no signal, and sampling no longer explores).
    single_completion_groups: int = 0
    # Share of the batch's sequences that are its most common completion: groups that collapsed
    # each to their own right answer keep it low; one answer given to every item makes it high.
    top_completion_share: float = 0.0


@dataclass(frozen=True)
class TrainedSelection:
    """The examples that reach forward/backward, and what was left out (still in BatchStats)."""

    examples: list[TrainingExample]
    # Every trained token has advantage 0: the gradient would be exactly 0 (an all-equal group,
    # an overridden sequence); on Tinker its tokens would still be billed.
    zero_advantage: int
    # No trained token at all (an empty completion, a mask covering everything).
    no_trained_token: int


def select_trained(examples: list[TrainingExample]) -> TrainedSelection:
    """Only the examples with a non-zero advantage on some trained token: the others add exactly
    0 to the importance-sampling loss's gradient, so dropping them changes nothing but cost."""
    kept: list[TrainingExample] = []
    zero = empty = 0
    for e in examples:
        if not any(e.trained):
            empty += 1
        elif all(a == 0.0 for a, t in zip(e.advantages, e.trained, strict=True) if t):
            zero += 1
        else:
            kept.append(e)
    return TrainedSelection(kept, zero, empty)


def _mean_std(values: list[float]) -> tuple[float, float]:
    if not values:
        return 0.0, 0.0
    mean = sum(values) / len(values)
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))


def rebn(returns: list[float], eps: float = REBN_EPS) -> list[float]:
    """The recipe's ReBN over a pool: `(G - mean) / (std + eps)`, std with Bessel's correction;
    fewer than two values or all equal: zeros."""
    n = len(returns)
    if n < 2:
        return [0.0] * n
    mean = sum(returns) / n
    std = math.sqrt(sum((g - mean) ** 2 for g in returns) / (n - 1))
    if std == 0.0:
        return [0.0] * n
    return [(g - mean) / (std + eps) for g in returns]


def _check_finite(scores: list[float], where: str) -> None:
    for i, s in enumerate(scores):
        if not math.isfinite(s):
            raise ValueError(
                f"{where}: sequence {i} has a non-finite score ({s}); the environment must score every item with a finite number"
            )


def build_examples(
    batch: list[dict[str, Any]],
    *,
    max_length: int | None = None,
    normalization: str = "group_std",
    normalize_std: bool | None = None,
) -> tuple[list[TrainingExample], BatchStats]:
    """Training examples for every sequence of every group, and the batch's statistics.

    Groups that carry `advantages` use them as given; groups flagged REBN_OVER_BATCH get their
    scores normalised over all flagged sequences of the batch; the others get group-relative
    ones (`normalization`: "group_std" divides by the group's std, "mean_center" only centres).
    Overrides then zero what the environment asked to zero.
    """
    if normalize_std is not None:
        normalization = "group_std" if normalize_std else "mean_center"
    if normalization not in NORMALIZATIONS:
        raise ValueError(f"advantage_normalization must be one of {NORMALIZATIONS}, got {normalization!r}")
    for g, group in enumerate(batch):
        if not (len(group["tokens"]) == len(group["masks"]) == len(group["scores"])):
            raise ValueError("a group's tokens, masks and scores must have one entry per sequence")
        _check_finite([float(s) for s in group["scores"]], f"group {g} of the batch")
    # ReBN over the pool: every flagged sequence of the batch together, as the recipe's step.
    pooled = [float(s) for group in batch if _group_overrides(group).get(REBN_OVER_BATCH) for s in group["scores"]]
    pooled_adv = iter(rebn(pooled))
    examples: list[TrainingExample] = []
    group_means: list[float] = []
    all_scores: list[float] = []
    zero_signal = per_token_groups = total_tokens = zeroed = single = 0
    completion_lengths: list[int] = []
    completion_counts: Counter[tuple[int, ...]] = Counter()
    for group in batch:
        tokens_G = group["tokens"]
        masks_G = group["masks"]
        scores_G = [float(s) for s in group["scores"]]
        group_over = _group_overrides(group)
        given = group.get("advantages")
        logprobs_G = group.get("inference_logprobs") or [None] * len(tokens_G)
        if len(logprobs_G) != len(tokens_G):
            logprobs_G = [None] * len(tokens_G)
        advantages_G: list[float | list[float]]
        if group_over.get(REBN_OVER_BATCH):
            advantages_G = [next(pooled_adv) for _ in scores_G]
            per_token_groups += 1
        elif given is not None:
            if len(given) != len(tokens_G):
                raise ValueError("a group's advantages must have one entry per sequence")
            per_token_groups += 1
            advantages_G = list(given)
        else:
            advantages_G = list(group_advantages(scores_G, normalize_std=normalization == "group_std"))
            if all(a == 0.0 for a in advantages_G):
                zero_signal += 1
        # Atropos' example trainer: the override zeroes the advantage after normalisation.
        overrides = group.get("overrides") or []
        for i in range(len(advantages_G)):
            per_seq = overrides[i] if i < len(overrides) and isinstance(overrides[i], dict) else {}
            if group_over.get(ZERO_OVERRIDE) or per_seq.get(ZERO_OVERRIDE):
                advantages_G[i] = 0.0
                zeroed += 1
        group_means.append(sum(scores_G) / len(scores_G) if scores_G else 0.0)
        all_scores.extend(scores_G)
        completions = [completion_tokens(list(t), list(m)) for t, m in zip(tokens_G, masks_G, strict=True)]
        completion_lengths.extend(len(c) for c in completions)
        completion_counts.update(completions)
        if len(completions) > 1 and all(c == completions[0] for c in completions):
            single += 1
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
        zeroed_sequences=zeroed,
        rebn_sequences=len(pooled),
        completion_tokens_mean=sum(completion_lengths) / len(completion_lengths) if completion_lengths else 0.0,
        single_completion_groups=single,
        top_completion_share=max(completion_counts.values()) / len(completion_lengths) if completion_lengths else 0.0,
    )
    return examples, stats


def completion_tokens(tokens: list[int], mask: list[int]) -> tuple[int, ...]:
    """The tokens of a sequence the model wrote (its mask is not MASKED there)."""
    return tuple(t for t, m in zip(tokens, mask, strict=True) if m != MASKED)


def _group_overrides(group: dict[str, Any]) -> dict[str, Any]:
    value = group.get("group_overrides")
    return value if isinstance(value, dict) else {}


def sampling_temperature(group: dict[str, Any]) -> float:
    """The temperature a group says it was sampled at (Atropos' example trainer's order:
    per-sequence override, generation_params, group_overrides; 1.0 when none says)."""
    temps: list[float] = []
    for o in group.get("overrides") or []:
        if isinstance(o, dict) and "temperature" in o:
            temps.append(float(o["temperature"]))
    for source in (group.get("generation_params"), group.get("group_overrides")):
        if isinstance(source, dict) and "temperature" in source and not temps:
            temps.append(float(source["temperature"]))
    return next((t for t in temps if t != 1.0), 1.0)


def unsupported_fields(batch: list[dict[str, Any]]) -> list[str]:
    """What a batch asks for that this trainer does not train on (said once, at the first batch)."""
    found = []
    if any(g.get("ref_logprobs") for g in batch):
        found.append(
            "ref_logprobs (a KL penalty against a reference policy): mcp-rl trains without a KL term, "
            "so they are ignored"
        )
    return found
