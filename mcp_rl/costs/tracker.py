"""Per-step costs and the cost cap, as the trainer records them (metrics.jsonl keys in rundir)."""

from __future__ import annotations

from typing import Any

from mcp_rl.costs.estimate import fmt
from mcp_rl.costs.meter import TokenCounts, TokenMeter, usd
from mcp_rl.costs.rates import RatesLookup, tinker_rates
from mcp_rl.runconfig import RunConfig
from mcp_rl.rundir import (
    COST_PREFILL_TOKENS_KEY,
    COST_SAMPLED_TOKENS_KEY,
    COST_STEP_USD_KEY,
    COST_TOTAL_USD_KEY,
    COST_TRAINED_TOKENS_KEY,
    read_jsonl,
)
from mcp_rl.settings import Settings


class CostTracker:
    """Takes a step's tokens from the backend's meter, prices them, keeps the total, and says
    when the next step would pass the cap. `lookup` None: a free backend ($0)."""

    def __init__(self, meter: TokenMeter, lookup: RatesLookup | None, cap_usd: float | None) -> None:
        self.meter = meter
        self.lookup = lookup
        self.cap_usd = cap_usd
        self.total_usd = 0.0
        self.tokens = TokenCounts()
        self.dearest_step_usd = 0.0
        if cap_usd is not None and lookup is not None and lookup.rates is None:
            raise RuntimeError(
                f"max_cost_usd is set to ${cap_usd:g} but the run's cost cannot be estimated: {lookup.problem}. "
                "The cap cannot be enforced without rates; fix the pricing file or unset max_cost_usd."
            )

    def step(self) -> dict[str, Any]:
        counts = self.meter.take()
        self.tokens = self.tokens + counts
        if self.lookup is None:
            cost: float | None = 0.0
        else:
            cost = usd(counts, self.lookup.rates)
        if cost is not None:
            self.total_usd += cost
            self.dearest_step_usd = max(self.dearest_step_usd, cost)
        return {
            COST_PREFILL_TOKENS_KEY: counts.prefill,
            COST_SAMPLED_TOKENS_KEY: counts.sampled,
            COST_TRAINED_TOKENS_KEY: counts.trained,
            COST_STEP_USD_KEY: cost,
            COST_TOTAL_USD_KEY: self.total_usd if cost is not None else None,
        }

    def resume(self, total_usd: float) -> None:
        """A resumed run goes on counting from what its earlier steps recorded."""
        self.total_usd = total_usd

    def cap_reached(self) -> str | None:
        """The stop cause when the next step (priced as the dearest so far) would pass the cap."""
        if self.cap_usd is None or self.lookup is None:
            return None
        if self.total_usd + self.dearest_step_usd > self.cap_usd:
            return (
                f"cost cap reached at ${fmt(self.total_usd)} (estimated; max_cost_usd ${self.cap_usd:g}: the next step, "
                f"about ${fmt(self.dearest_step_usd)}, would pass it)"
            )
        return None


def tracker_for(backend: Any, config: RunConfig, settings: Settings) -> CostTracker:
    """The tracker of a run: priced when its backend meters a paid service, $0 otherwise (the
    local backend; a self-hosted Tinker-compatible server). A resumed run goes on from the total
    its earlier steps recorded."""
    meter = getattr(backend, "meter", None)
    paid = (
        isinstance(meter, TokenMeter) and config.trainer.backend == "tinker" and not config.trainer.self_hosted_server
    )
    lookup = tinker_rates(settings, config.trainer.base_model) if paid else None
    tracker = CostTracker(meter if isinstance(meter, TokenMeter) else TokenMeter(), lookup, config.trainer.max_cost_usd)
    if config.paths.metrics.exists():
        for line in reversed(read_jsonl(config.paths.metrics).rows):
            total = line.get(COST_TOTAL_USD_KEY)
            if isinstance(total, int | float) and not isinstance(total, bool):
                tracker.resume(float(total))
                break
    return tracker
