"""A run's cost so far, from its metrics.jsonl (rl_get_results)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from mcp_rl.costs.estimate import fmt
from mcp_rl.costs.tinker_billing import BilledUsage
from mcp_rl.rundir import (
    COST_PREFILL_TOKENS_KEY,
    COST_SAMPLED_TOKENS_KEY,
    COST_STEP_USD_KEY,
    COST_TOTAL_USD_KEY,
    COST_TRAINED_TOKENS_KEY,
)


class RunCost(BaseModel):
    label: str = Field("estimated", description="Every USD figure is an estimate from configs/pricing.yaml's rates.")
    total_usd: float | None = Field(
        None, description="Estimated USD so far (None: the run's model could not be priced)."
    )
    steps_priced: int = 0
    last_step_usd: float | None = None
    prefill_tokens: int = 0
    sampled_tokens: int = 0
    trained_tokens: int = 0
    summary: str = ""
    billed: BilledUsage | None = Field(
        None, description="Tinker runs: what Tinker's billing API reports for the run's sessions, beside the estimate."
    )
    billed_note: str | None = Field(None, description="Why Tinker's billed usage is not shown, when it is not.")


def add_billed(cost: RunCost, billed: BilledUsage | None, note: str | None) -> RunCost:
    """The estimate with Tinker's billed usage beside it (or why there is none)."""
    cost.billed, cost.billed_note = billed, note
    cost.summary += " " + (billed.summary if billed is not None else note or "")
    return cost


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def run_cost(rows: list[dict[str, Any]]) -> RunCost | None:
    """None when no step recorded a cost (a run from before costs were recorded)."""
    priced = [row for row in rows if COST_TRAINED_TOKENS_KEY in row or COST_TOTAL_USD_KEY in row]
    if not priced:
        return None
    cost = RunCost(
        prefill_tokens=sum(_int(r.get(COST_PREFILL_TOKENS_KEY)) for r in priced),
        sampled_tokens=sum(_int(r.get(COST_SAMPLED_TOKENS_KEY)) for r in priced),
        trained_tokens=sum(_int(r.get(COST_TRAINED_TOKENS_KEY)) for r in priced),
        total_usd=_num(priced[-1].get(COST_TOTAL_USD_KEY)),
        last_step_usd=_num(priced[-1].get(COST_STEP_USD_KEY)),
        steps_priced=sum(1 for r in priced if _num(r.get(COST_STEP_USD_KEY)) is not None),
    )
    tokens = (
        f"{cost.prefill_tokens:,} prefilled, {cost.sampled_tokens:,} sampled, {cost.trained_tokens:,} trained tokens"
    )
    if cost.total_usd is None:
        cost.summary = f"Cost: unknown (the model's rates are not known); {tokens} over {len(priced)} steps."
    else:
        cost.summary = f"Estimated cost so far: ${fmt(cost.total_usd)} ({tokens} over {len(priced)} steps)."
    return cost
