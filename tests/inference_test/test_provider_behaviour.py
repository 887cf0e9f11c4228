"""Smoke tests against a provider that behaves as OpenRouter documents: reasoning models, errors,
budgets, environments with a bare server config. OpenRouter is the FAKE on loopback; the
detached worker, its gateway and the Atropos `process` children are real."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest
from pydantic import SecretStr

from mcp_rl.config.environment_service import EnvironmentService
from mcp_rl.inference_test import service
from mcp_rl.settings import Settings
from tests.fakes.fake_openrouter import FakeOpenRouter
from tests.kit.smoke_tests import ENV_NAME

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

KEY = "sk-or-v1-FAKE-provider"
DEFAULTS = ["qwen/qwen3-8b", "z-ai/glm-4.7-flash", "minimax/minimax-m2.7"]


def _settings(home: Path, fake: FakeOpenRouter, key: str = KEY, env_paths: list[Path] | None = None) -> Settings:
    return Settings(
        home=home,
        env_paths=env_paths or [],
        model_path=Path(os.environ["MCP_RL_MODEL"]),
        openrouter_api_key=SecretStr(key),
        openrouter_base_url=fake.base_url,
    )


async def _run(settings: Settings, env_name: str = ENV_NAME, **kwargs):
    environments = EnvironmentService(settings)
    environments.select(env_name)
    env_ref, env_config = service.session_environment(environments)
    started = service.start_test(settings, env_ref, env_config, **kwargs)
    return await service.wait_for_test(settings, started.test_id, 240)


async def test_the_default_reasoning_models_answer_and_say_what_they_cost(home: Path) -> None:
    # All three reason by default; MiniMax cannot switch it off (a 400 if asked to).
    behaviours = {"qwen/qwen3-8b": "reasoning", "z-ai/glm-4.7-flash": "reasoning", "minimax/minimax-m2.7": "mandatory"}
    with FakeOpenRouter(api_key=KEY, behaviours=behaviours) as fake:
        done = await _run(_settings(home, fake), num_steps=1, group_size=2)
        sent = {m: [r.body for r in fake.completions_for(m)] for m in DEFAULTS}
    assert done.state == "completed", done.message
    assert [m.model for m in done.models_tested] == DEFAULTS
    for m in done.models_tested:
        assert m.state == "succeeded", (m.model, m.error, m.log_tail)
        assert m.total_completions == 2 and m.accuracy == 0.5
        assert m.usage is not None and m.usage.requests == 2 and m.usage.answers == 2 and m.usage.empty_answers == 0
        assert m.usage.total_tokens > 0 and m.usage.cost_usd and m.usage.cost_usd > 0
        assert m.usage.request_budget == 2 + 4
    # The environment asks for 8 tokens; the gateway sent each model's options from test_models.yaml.
    assert all(b["reasoning"] == {"enabled": False} and b["max_tokens"] >= 512 for b in sent["qwen/qwen3-8b"])
    assert all(
        b["reasoning"].get("enabled") is not False and b["max_tokens"] >= 1024 for b in sent["minimax/minimax-m2.7"]
    )
    assert "Used 6 requests" in done.message and "$" in done.message


async def test_each_provider_error_is_one_line_with_the_fix_and_costs_at_most_its_budget(home: Path) -> None:
    unknown, broke, silent, busy = "qwen/qwen3-8c", "fake/broke-model", "fake/silent-model", "fake/busy-model"
    behaviours = {broke: "nocredits", silent: "silent", busy: "ratelimited"}
    catalog = ["qwen/qwen3-8b", broke, silent, busy]
    with FakeOpenRouter(api_key=KEY, behaviours=behaviours, catalog=catalog, retry_after_s=0.5) as fake:
        done = await _run(
            _settings(home, fake), num_steps=2, group_size=2, models=[unknown, broke, silent, busy], max_parallel=4
        )
        paid = {m: len(fake.completions_for(m)) for m in (unknown, broke, silent, busy)}
    by = {m.model: m for m in done.models_tested}
    assert by[unknown].state == "failed" and "Unknown model id 'qwen/qwen3-8c'" in by[unknown].error
    assert "Closest ids: qwen/qwen3-8b" in by[unknown].error and paid[unknown] == 0  # checked before any paid call
    assert by[broke].state == "failed" and by[broke].error.startswith("No credits left") and paid[broke] == 1
    assert by[silent].state == "failed" and "every answer was empty" in by[silent].error
    assert "configs/test_models.yaml" in by[silent].error and paid[silent] <= by[silent].usage.request_budget
    assert by[busy].state == "succeeded" and by[busy].usage.retries >= 1 and by[busy].usage.errors.get("429")
    for m in (by[unknown], by[broke], by[silent]):
        assert "\n" not in m.error and "Fix:" in m.error and m.model in done.message


async def test_a_refused_key_stops_every_model_before_any_paid_call(home: Path) -> None:
    with FakeOpenRouter(api_key=KEY) as fake:
        done = await _run(_settings(home, fake, key="sk-or-v1-WRONG"), num_steps=1, group_size=2)
        paid = list(fake.requests)
    assert [m.state for m in done.models_tested] == ["failed"] * 3
    assert all(m.error.startswith("OpenRouter refused the key") for m in done.models_tested)
    assert paid == [] and done.summary.environment_working is False


async def test_an_environment_with_a_bare_server_config_is_pointed_at_the_provider(home: Path, tmp_path: Path) -> None:
    envs = tmp_path / "envs"
    envs.mkdir()
    (envs / "bare_arithmetic.py").write_text(
        textwrap.dedent('''
        from atroposlib.envs.base import BaseEnv
        from mcp_rl.environments.bundled.arithmetic import ArithmeticEnv


        class BareArithmetic(ArithmeticEnv, BaseEnv):
            """Arithmetic whose config_init returns one bare APIServerConfig (not a list)."""

            name = "bare_arithmetic"

            @classmethod
            def config_init(cls):
                env_config, servers = super().config_init()
                server = servers[0]
                server.base_url = "http://127.0.0.1:9/v1"  # nothing listens there
                return env_config, server
    ''')
    )
    # The model also leaves every third answer empty: the group holding one is dropped and redone.
    with FakeOpenRouter(behaviours={"fake/good-model": "sometimes"}) as fake:
        done = await _run(
            _settings(home, fake, env_paths=[envs]),
            "bare_arithmetic",
            num_steps=2,
            group_size=2,
            models=["fake/good-model"],
        )
        seen = fake.models_seen()
    (model,) = done.models_tested
    assert model.state == "succeeded", (model.error, model.log_tail)
    assert seen == {"fake/good-model"} and model.total_completions == 4
    assert model.usage is not None and model.usage.empty_answers >= 1
    assert model.notes and "answers were empty" in model.notes[0] and "configs/test_models.yaml" in model.notes[0]
