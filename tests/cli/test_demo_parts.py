"""The demo's set-up, without a run: no key reaches its server, its state dir starts clean."""

from __future__ import annotations

from pathlib import Path

import pytest

from mcp_rl.demo import DemoFailed, DemoOptions, bar, demo_home, server_env
from mcp_rl.settings import Settings
from tests.conftest import make_env


def test_server_env_has_no_keys_and_its_own_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("TINKER_API_KEY", "WANDB_API_KEY", "OPENROUTER_API_KEY", "MCP_RL_TOKEN"):
        monkeypatch.setenv(name, f"secret-{name}")
    monkeypatch.setenv("MCP_RL_ENV_PATHS", "/somewhere/else")
    monkeypatch.setenv("MCP_RL_HOME", "/the/users/home")
    env = server_env(tmp_path / "demo", tmp_path / "model")
    assert not any(v.startswith("secret-") for v in env.values())
    assert "MCP_RL_ENV_PATHS" not in env
    assert env["MCP_RL_HOME"] == str(tmp_path / "demo") and env["MCP_RL_MODEL"] == str(tmp_path / "model")
    assert env["MCP_RL_STATUS_MIN_INTERVAL"] == "0" and env["WANDB_MODE"] == "disabled"
    assert env["PATH"]  # the rest of the environment is kept


def test_demo_home_is_new_or_empty(tmp_path: Path) -> None:
    user = Settings.from_env(make_env(tmp_path / "user"))
    default = demo_home(DemoOptions(), user)
    assert default.parent == user.home / "demos" and default.is_dir()
    given = demo_home(DemoOptions(home=tmp_path / "fresh"), user)
    assert given == (tmp_path / "fresh").resolve()
    (given / "leftover").write_text("x")
    with pytest.raises(DemoFailed, match="not empty"):
        demo_home(DemoOptions(home=given), user)


def test_progress_bar() -> None:
    assert bar(0, 4) == "[" + "." * 24 + "]"
    assert bar(2, 4) == "[" + "#" * 12 + "." * 12 + "]"
    assert bar(4, 4) == "[" + "#" * 24 + "]"
