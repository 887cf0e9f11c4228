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
