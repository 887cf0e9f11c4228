"""The estimate of a training run, from its run file (or the config it would be built from).

Beside the config rather than in costs/: a preview builds the run file from the session's
config, and costs/ sits below config and imports none of it."""

from __future__ import annotations

import math
from typing import Any

from mcp_rl.config.build import build_run_config
from mcp_rl.config.environment_service import EnvironmentService
from mcp_rl.config.session import Session
from mcp_rl.costs.estimate import Estimate, RunShape, estimate_run, fmt
from mcp_rl.costs.openrouter import fetch_prices
from mcp_rl.costs.rates import tinker_rates
from mcp_rl.environments.introspect import ConfigSpec
from mcp_rl.environments.mcp_family.taskfile import keys_needed
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
    estimate = estimate_run(shape, tinker_rates(settings, shape.model) if billed else None)
    estimate.judge = judge_estimate(settings, config, shape)
    return estimate


def judge_estimate(settings: Settings, config: RunConfig, shape: RunShape) -> dict[str, Any] | None:
    """An MCP task's paid judge over the run (None: no task file, or no paid judge): every group
    and held-out episode judged, each call at its bound, held to the task's judge.max_cost_usd."""
    groups = shape.steps * math.ceil(shape.batch_size / max(1, shape.group_size))
    return task_judge_estimate(
        settings,
        config.env.get("task_file"),
        shape.group_size,
        groups,
        shape.evaluations(),
        config.env.get("eval_scenarios"),
    )


def task_judge_estimate(
    settings: Settings, task_file: object, group_size: int, groups: int, evaluations: int, eval_scenarios: object = None
) -> dict[str, Any] | None:
    """The estimate of a task file's paid judge over `groups` groups and `evaluations` held-out
    evaluations (None: not an MCP task file, or its judge is not a paid model). A run's and a
    smoke test's alike."""
    if not keys_needed(task_file):
        return None
    # The task file's loader (pydantic, yaml): only a task with a paid judge reads it here.
    from mcp_rl.environments.mcp_family import judge
    from mcp_rl.environments.mcp_family.taskfile import TaskFileError, load

    try:
        task = load(str(task_file))
    except TaskFileError as exc:
        return {"label": "estimated", "at_most_usd": None, "summary": f"the judge: cost unknown ({exc})."}
    spec = task.spec.judge
    assert spec is not None  # keys_needed said it has one
    prices, problem = fetch_prices(settings.openrouter_base_url)
    price = prices.get(spec.model)
    if price is None:
        why = problem or f"no price for {spec.model!r} in OpenRouter's /models answer"
        return {
            "label": "estimated",
            "model": spec.model,
            "at_most_usd": None,
            "summary": f"the judge: cost unknown ({why}).",
        }
    limits = task.spec.limits
    raw = eval_scenarios
    held_out = len(task.held_out) if not isinstance(raw, int) or raw <= 0 else min(raw, len(task.held_out))
    # An episode as the judge reads it: every turn at its token limit (~4 characters a token) and
    # every call's result at its byte limit.
    episode_chars = limits.max_turns * limits.max_tokens_per_turn * 4 + limits.max_tool_calls * limits.output_bytes
    found = judge.estimate(spec, price, group_size, groups, evaluations, held_out, episode_chars)
    return {
        "label": "estimated",
        "model": spec.model,
        "calls": found.calls,
        "per_group_usd_at_most": round(found.per_call_usd, 6),
        "at_most_usd": round(found.at_most_usd, 6),
        "max_cost_usd": spec.max_cost_usd,
        "summary": f"the judge: at most ${fmt(found.at_most_usd)} ({found.note}).",
    }


# The run id of a run file built only to be priced (never written, never started).
PREVIEW_RUN_ID = "cost-preview"


def preview(
    settings: Settings, session: Session, spec: ConfigSpec
) -> tuple[RunConfig | None, Estimate | None, str | None]:
    """The run file the current config would start, and its estimate; or why there is none."""
    try:
        config = build_run_config(settings, session, spec, PREVIEW_RUN_ID)
    except UserError as exc:
        return None, None, f"no estimate until the config can start: {exc}"
    return config, estimate_training(settings, config), None


def cost_preview(settings: Settings, environments: EnvironmentService) -> dict[str, Any]:
    """rl_get_current_config's estimated_cost: the estimate of the selected config, or why none."""
    session, spec = environments.selected()
    _, estimate, problem = preview(settings, session, spec)
    if estimate is None:
        return {"label": "estimated", "summary": f"Estimated cost: unknown ({problem})."}
    data = estimate.as_dict()
    cap = session.run_options.get("max_cost_usd") if isinstance(session.run_options, dict) else None
    data["max_cost_usd"] = cap
    return data
