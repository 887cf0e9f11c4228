"""The estimate of a training run, from its run file (or the config it would be built from)."""

from __future__ import annotations

from mcp_rl.costs.estimate import Estimate, RunShape, estimate_run
from mcp_rl.costs.rates import tinker_rates
from mcp_rl.runconfig import RunConfig
from mcp_rl.settings import Settings


def run_shape(config: RunConfig) -> RunShape:
    t = config.trainer
    # Atropos environments cap a completion at max_token_length; the trainer takes at most
    # max_token_trainer_length tokens of a sequence.
    raw = config.env.get("max_token_length")
    max_tokens = raw if isinstance(raw, int) and not isinstance(raw, bool) and raw > 0 else t.max_token_trainer_length
    max_tokens = min(max_tokens, t.max_token_trainer_length)
    low, high = 32, 512
    high = max(low, min(high, t.max_token_trainer_length - 1))
    return RunShape(
        backend=t.backend,
        model=t.base_model,
        steps=t.num_steps,
        batch_size=t.batch_size,
        group_size=t.group_size,
        max_tokens=max_tokens,
        max_sequence=t.max_token_trainer_length,
        eval_every=t.eval_every,
        prompt_tokens=(low, high),
    )


def estimate_training(settings: Settings, config: RunConfig) -> Estimate:
    shape = run_shape(config)
    if shape.backend != "tinker":
        return estimate_run(shape, None)
    return estimate_run(shape, tinker_rates(settings, shape.model))
