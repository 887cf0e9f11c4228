"""From one Atropos batch to what a step trains: the examples, what was left out and why.

The trainer trains exactly what the environment asked for (advantages.build_examples honours
overrides and the batch-wide ReBN of GemEnv) and sends forward/backward only the examples that
can move the weights: an example whose trained tokens all have advantage 0 adds exactly 0 to the
gradient (an all-equal group, an overridden sequence), yet on Tinker its tokens are billed. They
stay in the statistics (reward, groups, zero-signal groups).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from mcp_rl.trainer.advantages import (
    BatchStats,
    build_examples,
    sampling_temperature,
    select_trained,
    unsupported_fields,
)
from mcp_rl.trainer.backends.base import TrainingExample
from mcp_rl.trainer.policy_lag import lag_metrics

log = logging.getLogger(__name__)


class RefusedBatch(ValueError):
    """The batch asks for something the trainer would train wrongly; the message says what."""


@dataclass
class Notices:
    """What was already said once in this run (ignored fields are logged at their first batch)."""

    said: set[str] = field(default_factory=set)

    def once(self, text: str) -> None:
        if text not in self.said:
            self.said.add(text)
            log.warning("the environment's batch carries %s", text)


@dataclass(frozen=True)
class PreparedStep:
    examples: list[TrainingExample]  # every sequence of the batch
    trained: list[TrainingExample]  # those that go through forward/backward
    stats: BatchStats
    metrics: dict[str, float]


def prepare_step(
    batch: list[dict[str, Any]],
    *,
    max_length: int | None,
    normalization: str,
    notices: Notices,
    environment: str = "the environment",
    lags: list[int | None] | None = None,
    max_lag: int | None = None,
    mixed_groups_only: bool = False,
) -> PreparedStep:
    """`lags`: per sequence, how many steps behind its sampler was (policy_lag); sequences more
    than `max_lag` behind are not trained (None: no bound)."""
    for group in batch:
        temperature = sampling_temperature(group)
        if temperature != 1.0:
            # Both backends train the untempered policy; samples drawn at another temperature
            # would be trained against logprobs of a different distribution.
            raise RefusedBatch(
                f"{environment} sampled a training group at temperature {temperature:g} (generation_params / "
                "overrides); mcp-rl trains the temperature-1 policy only, so its importance ratios would be "
                "wrong: set the environment's sampling temperature to 1.0"
            )
    for text in unsupported_fields(batch):
        notices.once(text)
    try:
        examples, stats = build_examples(batch, max_length=max_length, normalization=normalization)
    except ValueError as exc:
        raise RefusedBatch(f"{environment} sent a batch the trainer cannot use: {exc}") from exc
    lags = lags if lags is not None and len(lags) == len(examples) else [None] * len(examples)
    fresh = [e for e, lag in zip(examples, lags, strict=True) if max_lag is None or lag is None or lag <= max_lag]
    selection = select_trained(fresh)
    metrics = {
        **lag_metrics(lags, len(examples) - len(fresh)),
        "batch/zeroed_sequences": float(stats.zeroed_sequences),
        "batch/trained_sequences": float(len(selection.examples)),
        "batch/skipped_zero_advantage": float(selection.zero_advantage),
        "batch/skipped_no_trained_token": float(selection.no_trained_token),
    }
    # What reward/mean covers: an environment that drops all-equal groups before sending
    # (Atropos' ensure_scores_are_not_same, gsm8k's default) only lets mixed groups through, so
    # reward/mean leans toward 0.5 and is no success rate (the env's train/percent_correct is).
    metrics["reward/mixed_groups_only"] = 1.0 if mixed_groups_only else 0.0
    if stats.rebn_sequences:
        metrics["batch/rebn_sequences"] = float(stats.rebn_sequences)
    return PreparedStep(examples, selection.examples, stats, metrics)
