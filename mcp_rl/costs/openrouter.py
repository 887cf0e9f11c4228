"""OpenRouter's prices (its free GET /models answer: USD per prompt and completion token) and a
smoke test's estimated spend per model, stated before its first paid request.

A smoke test's own cap is each model's token budget (the test's gateway stops a model at it), so
its estimate is an upper bound: the budget's tokens at the model's dearer rate. A price that
cannot be read is "unknown", never $0; the local model is free.
"""

from __future__ import annotations

import math
from typing import Any

import httpx

from mcp_rl.model_specs import ModelSpec
from mcp_rl.settings import Settings

MODELS_TIMEOUT_S = 8.0
MILLION = 1_000_000


def _per_token(value: Any) -> float | None:
    try:
        price = float(value)
    except (TypeError, ValueError):
        return None
    return price if math.isfinite(price) and price >= 0 else None


def fetch_prices(
    base_url: str, client: httpx.Client | None = None
) -> tuple[dict[str, tuple[float, float]], str | None]:
    """{model id: (USD per prompt token, USD per completion token)}, or a problem in words."""
    client = client or httpx.Client(timeout=MODELS_TIMEOUT_S)
    url = f"{base_url.rstrip('/')}/models"
    try:
        response = client.get(url)
        data = response.json().get("data", []) if response.status_code == 200 else None
    except (httpx.HTTPError, ValueError, AttributeError) as exc:
        return {}, f"{url} could not be read ({type(exc).__name__})"
    if not isinstance(data, list):
        return {}, f"{url} answered {response.status_code} without a model list"
    prices: dict[str, tuple[float, float]] = {}
    for entry in data:
        if not isinstance(entry, dict) or not isinstance(entry.get("pricing"), dict):
            continue
        prompt = _per_token(entry["pricing"].get("prompt"))
        completion = _per_token(entry["pricing"].get("completion"))
        if prompt is not None and completion is not None:
            prices[str(entry.get("id"))] = (prompt, completion)
    return prices, None


def price_models(settings: Settings, models: list[ModelSpec], client: httpx.Client | None = None) -> list[ModelSpec]:
    """The models with `estimated_max_usd` and `price_note` filled in (estimated, before any request)."""
    remote = [m for m in models if m.provider == "openrouter"]
    prices: dict[str, tuple[float, float]] = {}
    problem = None
    if remote:
        prices, problem = fetch_prices(settings.openrouter_base_url, client)
    out = []
    for model in models:
        if model.provider != "openrouter":
            out.append(model.model_copy(update={"estimated_max_usd": 0.0, "price_note": "$0: runs on this machine"}))
            continue
        price = prices.get(model.id)
        if price is None or model.token_budget is None:
            why = problem or f"no price for {model.id!r} in OpenRouter's /models answer"
            note = f"estimated cost unknown ({why})"
            out.append(model.model_copy(update={"estimated_max_usd": None, "price_note": note}))
            continue
        prompt, completion = price
        most = model.token_budget * max(prompt, completion)
        note = (
            f"estimated at most ${most:.4f}: its budget of {model.token_budget:,} tokens at OpenRouter's "
            f"${prompt * MILLION:g} (prompt) / ${completion * MILLION:g} (completion) per million tokens; "
            "usage.cost_usd shows what OpenRouter reports it cost"
        )
        out.append(model.model_copy(update={"estimated_max_usd": round(most, 6), "price_note": note}))
    return out
