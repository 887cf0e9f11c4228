"""The estimate of a training run, from its run file (or the config it would be built from)."""

from __future__ import annotations

from typing import Any

from mcp_rl.costs.estimate import Estimate, RunShape, estimate_run
from mcp_rl.costs.rates import tinker_rates
from mcp_rl.errors import UserError
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
        self_hosted=t.self_hosted_server,
    )


def estimate_training(settings: Settings, config: RunConfig) -> Estimate:
    shape = run_shape(config)
    billed = shape.backend == "tinker" and not shape.self_hosted
    return estimate_run(shape, tinker_rates(settings, shape.model) if billed else None)


# The run id of a run file built only to be priced (never written, never started).
PREVIEW_RUN_ID = "cost-preview"


def preview(settings: Settings, session: Any, spec: Any) -> tuple[RunConfig | None, Estimate | None, str | None]:
    """The run file the current config would start, and its estimate; or why there is none."""
    # config imports the environment layer; only a preview needs it
    from mcp_rl.config import build_run_config

    try:
        config = build_run_config(settings, session, spec, PREVIEW_RUN_ID)
    except UserError as exc:
        return None, None, f"no estimate until the config can start: {exc}"
    return config, estimate_training(settings, config), None


def cost_preview(settings: Settings, environments: Any) -> dict[str, Any]:
    """rl_get_current_config's estimated_cost: the estimate of the selected config, or why none."""
    session, spec = environments.selected()
    _, estimate, problem = preview(settings, session, spec)
    if estimate is None:
        return {"label": "estimated", "summary": f"Estimated cost: unknown ({problem})."}
    data = estimate.as_dict()
    cap = session.run_options.get("max_cost_usd") if isinstance(session.run_options, dict) else None
    data["max_cost_usd"] = cap
    return data
