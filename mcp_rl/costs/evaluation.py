"""What a checkpoint evaluation (rl_evaluate_checkpoint) costs: the estimate before it starts (per
model, from the held-out items' count, prompt size and answer length and the model's rates), the
worker's own cap (checked before each chunk of items), and the cost after (the tokens each model
was metered priced at the same rates; OpenRouter's reported `usage.cost` beside it).

Tinker models (the checkpoint and its base) are priced from configs/pricing.yaml (prefill and
sample rates of the run's base model), OpenRouter models from OpenRouter's /models answer, local
models are free. A model that cannot be priced is "unknown", never $0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, Field

from mcp_rl.costs.estimate import Estimate, fmt
from mcp_rl.costs.rates import tinker_rates
from mcp_rl.settings import Settings

MILLION = 1_000_000
# Items the worker samples between two cap checks (its progress chunk).
CHUNK_ITEMS = 32
# Prompt tokens from the items' characters: ~4 characters a token in English and digits, plus a
# chat template's few tokens around each message. A range, because the tokenizer is not loaded.
CHARS_PER_TOKEN = (5.0, 4.0, 2.5)  # low, expected, high
TEMPLATE_TOKENS = (3, 5, 8)  # per message
SHORT_ANSWER = 0.1
EXPECTED_ANSWER = 0.5
POINTS = ("low", "expected", "high")
# Where Tinker's billed usage can be read (checked in the installed tinker SDK 0.38).
TINKER_BILLING_NOTE = (
    "Tinker's billed usage is not read here: it is available per session and hour through Tinker's billing API "
    "(tinker.AdminClient.get_billing_usage, GET /api/v1/billing/usage/events; needs the admin or billing-admin "
    "role and lags real time by up to a few hours), and on Tinker's console."
)

ModelKindName = Literal["local", "tinker", "openrouter"]


class ItemStats(BaseModel):
    """What the estimate needs of the held-out items (counted without a tokenizer)."""

    items: int
    max_tokens: int
    prompt_chars: float = Field(description="Mean characters of an item's messages.")
    messages: float = Field(description="Mean messages per item.")
    description: str = ""

    def prompt_tokens(self) -> dict[str, int]:
        return {
            point: max(1, math.ceil(self.prompt_chars / chars + self.messages * template + 3))
            for point, chars, template in zip(POINTS, CHARS_PER_TOKEN, TEMPLATE_TOKENS, strict=True)
        }

    def completion_tokens(self) -> dict[str, int]:
        return {
            "low": max(1, round(self.max_tokens * SHORT_ANSWER)),
            "expected": max(1, round(self.max_tokens * EXPECTED_ANSWER)),
            "high": self.max_tokens,
        }


class ModelPricing(BaseModel):
    """One evaluated model's rates (USD per million tokens) and the most an item may cost."""

    model: str
    kind: ModelKindName
    free: bool = False
    prompt_per_million: float | None = None
    completion_per_million: float | None = None
    source: str = Field("", description="Where the rates come from, or why the model cannot be priced.")
    item_high_usd: float | None = Field(None, description="The most one item is estimated to cost (the cap's unit).")

    @property
    def known(self) -> bool:
        return self.free or (self.prompt_per_million is not None and self.completion_per_million is not None)

    def usd(self, prompt_tokens: int, completion_tokens: int) -> float | None:
        if self.free:
            return 0.0
        if self.prompt_per_million is None or self.completion_per_million is None:
            return None
        return (prompt_tokens * self.prompt_per_million + completion_tokens * self.completion_per_million) / MILLION


def price_models(settings: Settings, models: list[tuple[str, str, str | None]]) -> list[ModelPricing]:
    """Rates of (id, kind, base model) for each evaluated model; OpenRouter's /models read once."""
    remote = [model_id for model_id, kind, _ in models if kind == "openrouter"]
    prices: dict[str, tuple[float, float]] = {}
    problem = None
    if remote:
        # httpx only when an OpenRouter model is evaluated
        from mcp_rl.costs.openrouter import fetch_prices

        prices, problem = fetch_prices(settings.openrouter_base_url)
    out: list[ModelPricing] = []
    for model_id, kind, base_model in models:
        if kind == "local":
            out.append(ModelPricing(model=model_id, kind="local", free=True, source="$0: runs on this machine"))
        elif kind == "tinker":
            lookup = tinker_rates(settings, base_model or "")
            rates = lookup.rates
            if rates is None:
                out.append(ModelPricing(model=model_id, kind="tinker", source=f"unknown: {lookup.problem}"))
            else:
                out.append(
                    ModelPricing(
                        model=model_id,
                        kind="tinker",
                        prompt_per_million=rates.prefill,
                        completion_per_million=rates.sample,
                        source=rates.describe(),
                    )
                )
        else:
            price = prices.get(model_id)
            if price is None:
                why = problem or f"no price for {model_id!r} in OpenRouter's /models answer"
                out.append(ModelPricing(model=model_id, kind="openrouter", source=f"unknown: {why}"))
            else:
                out.append(
                    ModelPricing(
                        model=model_id,
                        kind="openrouter",
                        prompt_per_million=price[0] * MILLION,
                        completion_per_million=price[1] * MILLION,
                        source=f"OpenRouter's /models prices for {model_id} (USD per token x 1e6)",
                    )
                )
    return out


@dataclass
class EvaluationEstimate(Estimate):
    """An evaluation's estimate. "Step" here is one chunk of items (what the cap is checked on)."""

    per_model: list[dict[str, Any]] = field(default_factory=list)

    def summary(self) -> str:
        if self.free:
            return "$0: every model runs on this machine (no paid service)."
        d = self.drivers
        what = (
            f"{d['items']} held-out items x {len(d['models'])} models ({', '.join(d['models'])}), answers of up to "
            f"{d['max_tokens']} tokens, prompts of about {d['prompt_tokens_assumed']['expected']} tokens"
        )
        parts = "; ".join(
            f"{m['model']}: {'$0' if m['free'] else '$' + fmt(m['usd']['low']) + '-$' + fmt(m['usd']['high'])}"
            for m in self.per_model
        )
        if not self.known:
            return f"Estimated cost: unknown ({self.problem}). Per model: {parts}. Drivers: {what}."
        run = self.run_usd
        return (
            f"Estimated cost: ${fmt(run['low'])}-${fmt(run['high'])} for the evaluation (expected "
            f"${fmt(run['expected'])}). Per model: {parts}. Drivers: {what}."
        )

    def as_dict(self) -> dict[str, Any]:
        data = super().as_dict()
        data["per_chunk_usd"] = data.pop("per_step_usd")
        data["per_chunk_tokens"] = data.pop("per_step_tokens")
        data["evaluation_usd"] = data.pop("run_usd")
        data["per_model"] = self.per_model
        data["billing"] = TINKER_BILLING_NOTE if any(m["kind"] == "tinker" for m in self.per_model) else None
        return data


def estimate_evaluation(stats: ItemStats, pricing: list[ModelPricing]) -> tuple[EvaluationEstimate, list[ModelPricing]]:
    """The estimate, and the pricing with each model's most per item filled in."""
    prompt, completion = stats.prompt_tokens(), stats.completion_tokens()
    free = all(p.free for p in pricing)
    drivers: dict[str, Any] = {
        "backend": "evaluation",
        "items": stats.items,
        "max_tokens": stats.max_tokens,
        "prompt_tokens_assumed": prompt,
        "models": [p.model for p in pricing],
        "chunk_items": CHUNK_ITEMS,
    }
    problems = [f"{p.model}: {p.source}" for p in pricing if not p.known]
    estimate = EvaluationEstimate(
        free=free,
        drivers=drivers,
        rates="; ".join(f"{p.model}: {p.source}" for p in pricing if not p.free) or None,
        problem="; ".join(problems) or None,
    )
    priced: list[ModelPricing] = []
    paid = [p for p in pricing if not p.free]
    for p in pricing:
        per_item = {point: p.usd(prompt[point], completion[point]) for point in POINTS}
        estimate.per_model.append(
            {
                "model": p.model,
                "kind": p.kind,
                "free": p.free,
                "tokens": {
                    point: {"prompt": stats.items * prompt[point], "completion": stats.items * completion[point]}
                    for point in POINTS
                },
                "usd": {point: None if v is None else v * stats.items for point, v in per_item.items()},
                "rates": p.source,
            }
        )
        priced.append(p.model_copy(update={"item_high_usd": per_item["high"]}))
    chunk = min(CHUNK_ITEMS, max(1, stats.items))
    for point in POINTS:
        costs = [p.usd(prompt[point], completion[point]) for p in paid]
        known = [c for c in costs if c is not None]
        total = None if len(known) < len(costs) else sum(known) * stats.items
        estimate.run_usd[point] = 0.0 if free else total
        # The cheapest chunk (low) to the dearest (high): what one cap check covers.
        if not known:
            estimate.step_usd[point] = 0.0 if free else None
        else:
            pick = min(known) if point == "low" else max(known)
            estimate.step_usd[point] = pick * chunk
        estimate.step_tokens[point] = {
            "prefill": chunk * prompt[point],
            "sampled": chunk * completion[point],
            "trained": 0,
        }
    return estimate, priced


class ModelCost(BaseModel):
    model: str
    kind: ModelKindName
    prompt_tokens: int = Field(0, description="Prompt tokens sent (Tinker: prefilled, as metered at its SDK calls).")
    completion_tokens: int = Field(0, description="Tokens sampled back.")
    estimated_usd: float | None = Field(None, description="Those tokens at the model's rates (None: no rates).")
    reported_usd: float | None = Field(
        None, description="What the provider reported it cost (OpenRouter's usage.cost); None where not reported."
    )


class EvaluationCost(BaseModel):
    label: str = Field(
        "estimated", description="estimated_usd figures come from rates; reported_usd from the provider."
    )
    models: list[ModelCost] = []
    estimated_usd: float | None = Field(None, description="Sum of the models' estimated_usd (None: one is unknown).")
    reported_usd: float | None = Field(None, description="Sum of what providers reported (where any did).")
    spent_usd: float | None = Field(None, description="What the cap counts: reported cost where given, else estimated.")
    max_cost_usd: float | None = None
    billing: str | None = Field(None, description="Where Tinker's billed usage is (Tinker models only).")
    summary: str = ""


def evaluation_cost(
    pricing: list[ModelPricing], used: dict[str, tuple[int, int, float | None]], cap: float | None
) -> EvaluationCost:
    """`used`: model id -> (prompt tokens, completion tokens, reported USD or None)."""
    models: list[ModelCost] = []
    for p in pricing:
        prompt, completion, reported = used.get(p.model, (0, 0, None))
        estimated = p.usd(prompt, completion)
        models.append(
            ModelCost(
                model=p.model,
                kind=p.kind,
                prompt_tokens=prompt,
                completion_tokens=completion,
                estimated_usd=None if estimated is None else round(estimated, 8),
                reported_usd=None if reported is None else round(reported, 8),
            )
        )
    estimated_all = [m.estimated_usd for m in models]
    estimated_total = None if any(v is None for v in estimated_all) else sum(v or 0.0 for v in estimated_all)
    reported_all = [m.reported_usd for m in models if m.reported_usd is not None]
    spent_parts = [m.reported_usd if m.reported_usd is not None else m.estimated_usd for m in models]
    spent = None if any(v is None for v in spent_parts) else sum(v or 0.0 for v in spent_parts)
    tinker = any(p.kind == "tinker" for p in pricing)
    cost = EvaluationCost(
        models=models,
        estimated_usd=None if estimated_total is None else round(estimated_total, 8),
        reported_usd=round(sum(reported_all), 8) if reported_all else None,
        spent_usd=None if spent is None else round(spent, 8),
        max_cost_usd=cap,
        billing=TINKER_BILLING_NOTE if tinker else None,
    )
    per_model = "; ".join(
        f"{m.model}: {m.prompt_tokens:,} prompt + {m.completion_tokens:,} sampled tokens, "
        + (
            "$0 (local)"
            if m.kind == "local"
            else f"estimated ${fmt(m.estimated_usd)}"
            + (f", OpenRouter reported ${fmt(m.reported_usd)}" if m.reported_usd is not None else "")
        )
        for m in models
    )
    if all(p.free for p in pricing):
        cost.summary = f"Cost: $0 (every model runs on this machine). {per_model}."
    else:
        cost.summary = (
            f"Cost so far: estimated ${fmt(cost.estimated_usd)}"
            + (f", reported by OpenRouter ${fmt(cost.reported_usd)}" if cost.reported_usd is not None else "")
            + (f" (cap ${cap:g})" if cap is not None else "")
            + f". {per_model}."
        )
    return cost


def cap_stop(cost: EvaluationCost, pricing: ModelPricing, next_items: int) -> str | None:
    """The stop cause when the next `next_items` items of `pricing`'s model could pass the cap."""
    cap = cost.max_cost_usd
    if cap is None or pricing.free:
        return None
    spent = cost.spent_usd
    upcoming = None if pricing.item_high_usd is None else pricing.item_high_usd * next_items
    if spent is None or upcoming is None:
        return (
            f"cost cap cannot be enforced: {pricing.model}'s cost is unknown ({pricing.source}); stopped before "
            "spending on it"
        )
    if spent + upcoming > cap:
        return (
            f"cost cap reached at ${fmt(spent)} (estimated; max_cost_usd ${cap:g}: the next {next_items} items of "
            f"{pricing.model}, up to about ${fmt(upcoming)}, would pass it)"
        )
    return None
