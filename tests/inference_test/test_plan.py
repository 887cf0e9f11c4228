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
    planned = service.plan_models(_settings(tmp_path, "sk-x"), ["qwen/qwen3-8b", "some/new-model", "local", "some/new-model"])
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
