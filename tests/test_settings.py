"""Settings: every environment variable read once, bad values refused with one clear line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from mcp_rl.doctor import check_keys
from mcp_rl.errors import UserError
from mcp_rl.settings import SECRET_ENV_VARS, Settings
from mcp_rl.supervisor.supervisor import Policy
from tests.conftest import make_env

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(
    ("name", "value", "said"),
    [
        ("MCP_RL_STATUS_MIN_INTERVAL", "abc", "MCP_RL_STATUS_MIN_INTERVAL must be a number of seconds"),
        ("MCP_RL_STOP_GRACE", "nan", "MCP_RL_STOP_GRACE must be a finite number"),
        ("MCP_RL_TRAINER_STOP_GRACE", "-1", "MCP_RL_TRAINER_STOP_GRACE: Input should be greater than 0"),
        ("MCP_RL_TOOL_TIME_BUDGET", "0", "MCP_RL_TOOL_TIME_BUDGET: Input should be greater than 0"),
        ("MCP_RL_WANDB_TIMEOUT", "45", "MCP_RL_WANDB_TIMEOUT (45 s) must be below MCP_RL_TOOL_TIME_BUDGET"),
        ("MCP_RL_LOG_LEVEL", "loud", "MCP_RL_LOG_LEVEL must be one of DEBUG, INFO"),
        ("MCP_RL_TORCH_THREADS", "-2", "MCP_RL_TORCH_THREADS must be at least 0"),
    ],
)
def test_a_bad_value_is_a_user_error_naming_the_variable(home: Path, name: str, value: str, said: str) -> None:
    with pytest.raises(UserError) as caught:
        Settings.from_env(make_env(home, **{name: value}))
    assert said in str(caught.value) and "\n" not in str(caught.value)


def test_values_are_read_once_into_fields(home: Path) -> None:
    settings = Settings.from_env(
        make_env(
            home,
            MCP_RL_WANDB_TIMEOUT="4",
            MCP_RL_LOG_LEVEL="debug",
            MCP_RL_TORCH_THREADS="2",
            MCP_RL_STOP_GRACE="3",
            MCP_RL_HEARTBEAT_TIMEOUT="7.5",
        )
    )
    assert (settings.wandb_deadline_s, settings.log_level, settings.torch_threads) == (4.0, "DEBUG", 2)
    policy = Policy.from_settings(settings)
    assert (policy.stop_grace_s, policy.heartbeat_timeout_s) == (3.0, 7.5)
    assert policy.trainer_stop_grace_s == Policy().trainer_stop_grace_s  # unset: the policy's default


def test_the_default_tool_budget_leaves_the_most_impatient_host_a_margin(home: Path) -> None:
    # Claude Desktop (the TypeScript SDK) cancels a request after 60 s; an answer needs time to travel.
    assert Settings.from_env(make_env(home)).tool_time_budget_s == 45.0 <= 60.0 - 10


def test_the_wandb_deadline_stays_inside_a_short_tool_budget(home: Path) -> None:
    assert Settings.from_env(make_env(home)).wandb_deadline_s == 8.0
    assert Settings.from_env(make_env(home, MCP_RL_TOOL_TIME_BUDGET="6")).wandb_deadline_s == 3.0


def test_serve_with_a_bad_value_exits_with_one_clear_line(home: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-c", "import sys; from mcp_rl.cli import main; sys.exit(main())", "serve"],
        input="",
        capture_output=True,
        text=True,
        env=make_env(home, MCP_RL_STATUS_MIN_INTERVAL="abc"),
        cwd=REPO,
        timeout=60,
    )
    assert out.returncode == 2
    assert out.stderr.strip().splitlines()[-1:] == [
        "mcp-rl serve: MCP_RL_STATUS_MIN_INTERVAL must be a number of seconds, got 'abc'"
    ]
    assert "Traceback" not in out.stderr


@pytest.mark.parametrize("name", ["TINKER_API_KEY", "WANDB_API_KEY", "OPENROUTER_API_KEY", "MCP_RL_TOKEN"])
def test_doctor_names_each_key_that_is_set_from_settings(home: Path, name: str) -> None:
    detail = check_keys(Settings.from_env(make_env(home, **{name: "s3cret-value"}))).detail
    assert "s3cret" not in detail
    for other in SECRET_ENV_VARS:
        assert f"{other} {'set' if other == name else 'not set'}" in detail


@pytest.mark.parametrize(
    "value",
    [
        "${TINKER_API_KEY}",
        "$TINKER_API_KEY",
        "...",
        "sk-...",
        "<your key>",
        "YOUR_API_KEY",
        "your-key-here",
        "  ",
        "xxxx",
    ],
)
def test_a_placeholder_is_not_a_key(value: str, tmp_path: Path) -> None:
    env = {"MCP_RL_HOME": str(tmp_path), "TINKER_API_KEY": value, "WANDB_API_KEY": value, "OPENROUTER_API_KEY": value}
    settings = Settings.from_env(env)
    assert settings.tinker_api_key is None and settings.wandb_api_key is None and settings.openrouter_api_key is None
    assert settings.default_backend == "local"
    assert not settings.wandb_enabled
    # A child process does not inherit the placeholder either (wandb or tinker would take it).
    child = settings.child_env(base=env)
    assert "TINKER_API_KEY" not in child and "WANDB_API_KEY" not in child and "OPENROUTER_API_KEY" not in child
    if value.strip():
        assert set(settings.placeholder_env_vars) == {"TINKER_API_KEY", "WANDB_API_KEY", "OPENROUTER_API_KEY"}
        assert any("TINKER_API_KEY holds a placeholder" in note for note in settings.placeholder_notes())
        keys = check_keys(settings)
        assert keys.status == "warn" and "TINKER_API_KEY holds a placeholder" in keys.detail and keys.fix


@pytest.mark.parametrize("value", ["tml-AbC123def456", "sk-or-v1-0123456789abcdef", "0123456789abcdef0123"])
def test_a_real_looking_key_is_a_key(value: str, tmp_path: Path) -> None:
    settings = Settings.from_env({"MCP_RL_HOME": str(tmp_path), "TINKER_API_KEY": value})
    assert settings.tinker_api_key is not None and settings.tinker_api_key.get_secret_value() == value
    assert settings.default_backend == "tinker" and settings.placeholder_env_vars == ()
