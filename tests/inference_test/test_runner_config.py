"""What a process-mode child gets: its config file and its environment (no processes started)."""

from __future__ import annotations

from pathlib import Path

import yaml
from pydantic import SecretStr

from mcp_rl.inference_test import runner
from mcp_rl.inference_test.models import TestSpec
from mcp_rl.model_specs import ModelSpec
from mcp_rl.runconfig import EnvironmentRef
from mcp_rl.settings import Settings

KEY = "sk-or-v1-FAKE-config-test"


def _spec(tmp_path: Path) -> TestSpec:
    return TestSpec(
        test_id="t-1",
        created_at=0.0,
        environment=EnvironmentRef(
            name="arithmetic", class_name="A", file_path=tmp_path / "a.py", project_root=tmp_path
        ),
        env_config={"group_size": 8, "batch_size": 4, "max_token_length": 512, "total_steps": 1000, "use_wandb": True},
        num_steps=3,
        group_size=16,
        models=[
            ModelSpec(id="qwen/qwen3-8b", name="Qwen3 8B", scale="small", provider="openrouter", slug="qwen_qwen3-8b"),
            ModelSpec(id="local", name="local", scale="tiny", provider="local", slug="local"),
        ],
        max_parallel=3,
        model_timeout_s=600,
        openrouter_base_url="https://openrouter.ai/api/v1",
    )


def test_config_overrides_only_what_a_smoke_test_needs_and_holds_no_key(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    remote, local = spec.models
    cfg = runner.process_config(spec, remote, tmp_path / remote.slug, Path("/models/tok"), spec.openrouter_base_url)
    env = cfg["env"]
    assert env["total_steps"] == 3 and env["group_size"] == 16 and env["use_wandb"] is False
    assert env["max_token_length"] == 512  # the environment's locked value stays
    assert env["batch_size"] == 16  # never below one group
    assert env["data_path_to_save_groups"] == str(tmp_path / remote.slug / "groups.jsonl")
    assert env["tokenizer_name"] == "/models/tok"
    assert cfg["openai"] == cfg["openai"] | {
        "base_url": "https://openrouter.ai/api/v1",
        "model_name": "qwen/qwen3-8b",
        "server_type": "openai",
        "api_key": None,  # the openai client then reads OPENAI_API_KEY from the environment
        "health_check": False,
    }
    local_cfg = runner.process_config(
        spec, local, tmp_path / "local", Path("/models/tok"), "http://127.0.0.1:9/m/local"
    )
    assert local_cfg["openai"]["base_url"] == "http://127.0.0.1:9/m/local" and local_cfg["openai"]["api_key"] is None
    assert KEY not in yaml.safe_dump(cfg) and KEY not in " ".join(runner.process_argv(spec, tmp_path / "c.yaml"))


def test_child_environment_carries_the_gateway_token_and_no_key(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-users-own-openai-key")
    monkeypatch.setenv("TINKER_API_KEY", "tk-secret")
    settings = Settings(home=tmp_path, openrouter_api_key=SecretStr(KEY), tinker_api_key=SecretStr("tk-secret"))
    env = runner.child_env(settings, "gateway-token")
    # The OpenRouter key stays in the worker: the child can only reach the test's gateway.
    assert env["OPENAI_API_KEY"] == "gateway-token"
    assert KEY not in env.values() and "sk-users-own-openai-key" not in env.values()
    assert not {"OPENROUTER_API_KEY", "TINKER_API_KEY"} & set(env)
    assert env["ATROPOS_ALLOW_DUMMY_MANAGED_SERVER"] == "1"
    assert env["WANDB_MODE"] == "disabled"


def test_tokenizer_is_the_base_models_when_it_is_here(tmp_path: Path) -> None:
    local = tmp_path / "embedded"
    local.mkdir()
    base = tmp_path / "base"
    base.mkdir()
    (base / "tokenizer.json").write_text("{}")
    assert runner.choose_tokenizer(str(base), local) == (base.resolve(), None)
    assert runner.choose_tokenizer(None, local) == (local, None)
    assert runner.choose_tokenizer(str(local), local) == (local, None)
    # A hub id whose tokenizer is neither cached nor reachable (tests run offline): the local one, said so.
    chosen, note = runner.choose_tokenizer("nobody-here/no-such-model-xyz", local)
    assert chosen == local and note and "nobody-here/no-such-model-xyz" in note and "embedded" in note


def test_any_server_config_becomes_the_one_server_the_yaml_points() -> None:
    # Atropos applies the config's `openai:` section only to a one-element list (resolve_openai_configs).
    from atroposlib.envs.server_handling.server_baseline import APIServerConfig, ServerBaseline

    from mcp_rl.inference_test.child import one_server

    bare = APIServerConfig(base_url="http://127.0.0.1:9/v1", model_name="m")
    assert one_server(bare) == ([bare], "config_init() returned a bare APIServerConfig; wrapped in a list")
    (from_baseline,), change = one_server(ServerBaseline(timeout=7))
    assert isinstance(from_baseline, APIServerConfig) and from_baseline.timeout == 7 and change
    two = [APIServerConfig(model_name="a"), APIServerConfig(model_name="b")]
    assert one_server(two)[0] == [two[0]]
    assert one_server([bare]) == ([bare], None)
