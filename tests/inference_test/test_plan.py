"""Which models a test runs."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import SecretStr

from mcp_rl.errors import UserError
from mcp_rl.inference_test import service
from mcp_rl.settings import Settings


def _settings(tmp_path: Path, key: str | None) -> Settings:
    return Settings(home=tmp_path, openrouter_api_key=SecretStr(key) if key else None)


def test_defaults_follow_the_key(tmp_path: Path) -> None:
    with_key = service.plan_models(_settings(tmp_path, "sk-x"), None)
    assert [m.id for m in with_key] == ["qwen/qwen3-8b", "z-ai/glm-4.7-flash", "minimax/minimax-m2.7"]
    assert [m.scale for m in with_key] == ["small", "medium", "large"]
    assert all(m.provider == "openrouter" for m in with_key)
    without = service.plan_models(_settings(tmp_path, None), None)
    assert [(m.id, m.provider) for m in without] == [("local", "local")]


def test_any_openrouter_id_with_local_and_nothing_dropped(tmp_path: Path) -> None:
    planned = service.plan_models(
        _settings(tmp_path, "sk-x"), ["qwen/qwen3-8b", "some/new-model", "local", "some/new-model"]
    )
    assert [m.id for m in planned] == ["qwen/qwen3-8b", "some/new-model", "local"]
    assert planned[0].name == "Qwen3 8B" and planned[1].scale == "custom"
    assert [m.slug for m in planned] == ["qwen_qwen3-8b", "some_new-model", "local"]


def test_slugs_stay_unique(tmp_path: Path) -> None:
    planned = service.plan_models(_settings(tmp_path, "sk-x"), ["a/b", "a_b"])
    assert [m.slug for m in planned] == ["a_b", "a_b-2"]


def test_openrouter_ids_need_the_key(tmp_path: Path) -> None:
    assert [m.id for m in service.plan_models(_settings(tmp_path, None), ["local"])] == ["local"]
    with pytest.raises(UserError, match="OPENROUTER_API_KEY"):
        service.plan_models(_settings(tmp_path, None), ["qwen/qwen3-8b"])
    with pytest.raises(UserError, match="empty"):
        service.plan_models(_settings(tmp_path, "k"), [" "])
    with pytest.raises(UserError, match="At most"):
        service.plan_models(_settings(tmp_path, "k"), [f"m/{i}" for i in range(9)])


def test_budgets_fit_the_test_and_options_come_from_the_catalog(tmp_path: Path) -> None:
    planned = service.plan_models(
        _settings(tmp_path, "sk-x"), ["qwen/qwen3-8b", "minimax/minimax-m2.7", "some/new-model", "local"]
    )
    qwen, minimax, custom, local = service.with_budgets(planned, 3, 16)
    assert qwen.reasoning == {"enabled": False} and qwen.min_max_tokens == 512
    assert minimax.reasoning and minimax.reasoning.get("enabled") is not False  # it always reasons
    assert custom.reasoning == {"effort": "low"} and custom.min_max_tokens == 2048
    assert local.reasoning is None and local.min_max_tokens is None
    # 3 x 16 answers and a quarter more; tokens in proportion.
    assert {m.request_budget for m in (qwen, minimax, custom, local)} == {60}
    assert qwen.token_budget == 60 * 4096
    (small,) = service.with_budgets(service.plan_models(_settings(tmp_path, "sk-x"), ["a/b"]), 1, 2)
    assert small.request_budget == 2 + 4


def test_a_multi_turn_environment_budgets_a_request_per_turn_of_each_episode() -> None:
    assert service.requests_per_group({"temperature": 1.0}, 16) == 16  # one answer each
    # GemEnv: up to max_turns requests an episode, episodes played num_envs at a time.
    assert service.requests_per_group({"max_turns": 4, "num_envs": 3}, 3) == 3 * 4
    assert service.requests_per_group({"max_turns": 4, "num_envs": 3}, 4) == 6 * 4
    assert service.requests_per_group({"max_turns": 5}, 8) == 8 * 5
    # No limit set: the game's own, unknown here; the budget assumes a bounded number.
    unlimited = service.requests_per_group({"max_turns": None, "num_envs": 8}, 16)
    assert unlimited == 16 * service.UNLIMITED_TURNS_BUDGET
