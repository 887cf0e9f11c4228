"""OpenRouter prices from its /models answer (the loopback OpenRouter serves them as the real
one does: USD per token, as strings) and a smoke test's estimate per model before any request."""

from __future__ import annotations

from pathlib import Path

from mcp_rl.costs.openrouter import price_models
from mcp_rl.inference_test import service
from mcp_rl.settings import Settings
from tests.fakes.fake_openrouter import PRICE_PER_TOKEN_USD, FakeOpenRouter


def settings(tmp_path: Path, base_url: str) -> Settings:
    return Settings.from_env(
        {"MCP_RL_HOME": str(tmp_path / "home"), "OPENROUTER_API_KEY": "sk-or-test", "OPENROUTER_BASE_URL": base_url}
    )


def test_each_model_gets_its_most_at_its_price_and_local_is_free(tmp_path: Path) -> None:
    with FakeOpenRouter() as fake:
        s = settings(tmp_path, fake.base_url)
        planned = service.with_budgets(service.plan_models(s, ["qwen/qwen3-8b", "local", "fake/good-model"]), 3, 4)
        priced = {m.id: m for m in price_models(s, planned)}
    for model_id in ("qwen/qwen3-8b", "fake/good-model"):
        model = priced[model_id]
        assert model.token_budget and model.estimated_max_usd == round(model.token_budget * PRICE_PER_TOKEN_USD, 6)
        assert (
            model.price_note
            and model.price_note.startswith("estimated at most $")
            and "usage.cost_usd" in model.price_note
        )
    assert priced["local"].estimated_max_usd == 0.0 and "$0" in (priced["local"].price_note or "")


def test_a_price_that_cannot_be_read_is_unknown_never_zero(tmp_path: Path) -> None:
    with FakeOpenRouter() as fake:
        s = settings(tmp_path, fake.base_url)
        planned = service.with_budgets(service.plan_models(s, ["vendor/not-listed"]), 3, 4)
        unlisted = price_models(s, planned)[0]
    assert unlisted.estimated_max_usd is None and "unknown" in (unlisted.price_note or "")
    gone = price_models(settings(tmp_path, "http://127.0.0.1:9/api/v1"), planned)[0]
    assert gone.estimated_max_usd is None and "could not be read" in (gone.price_note or "")
