"""The validator of MCP task files behind rl_validate_environment (a real child process, the tiny
stdio server), and the variables a task file names reaching the processes that start its server."""

from __future__ import annotations

from pathlib import Path

import pytest
from mcp import Client

from mcp_rl.environments.discovery import declared_env_vars
from mcp_rl.environments.mcp_family.taskfile import named_variables
from mcp_rl.environments.validate import validate_mcp_task, validation_for
from mcp_rl.errors import UserError
from mcp_rl.settings import SECRET_ENV_VARS, Settings, bundled_environments_dir
from tests.conftest import make_env, stdio_params
from tests.kit.mcp import ok
from tests.mcp_family.kit import TINY_SERVER, write_task

# The check runs in the validator's child: it sees the variable only if the task's names reach it.
NEEDS_VARIABLE = (
    "reward:\n  kind: check\n  check: |\n    import os\n    def check(answer, trace):\n"
    "        if os.environ.get('CAPITALS_EXTRA') != 'yes' or os.environ.get('OPENROUTER_API_KEY'):\n"
    "            raise RuntimeError('wrong environment')\n        return 1.0\n"
)


@pytest.fixture
def keys(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in SECRET_ENV_VARS:
        monkeypatch.setenv(name, f"sk-test-{name.lower()}-0123456789")
    monkeypatch.setenv("CAPITALS_EXTRA", "yes")
    monkeypatch.setenv("UNNAMED_SETTING", "no")


def test_a_good_task_file_passes_with_its_tools_and_the_withheld_ones(
    settings: Settings, tmp_path: Path, keys: None
) -> None:
    path = write_task(tmp_path, extra=NEEDS_VARIABLE)
    report = validate_mcp_task(settings, path, sample=False, timeout_s=120)
    assert report.ok, report.problems
    assert report.kind == "mcp" and report.train_items and report.held_out_items
    assert report.mcp is not None
    assert "capital" in report.mcp["offered"] and "wipe" in report.mcp["listed"]
    assert report.mcp["withheld"] == {
        "wipe": ["destructiveHint"],
        "crash": ["destructiveHint"],
        "web_search": ["openWorldHint"],
    }
    assert any("wipe declares destructiveHint" in w for w in report.warnings)
    assert validation_for(settings, path) is not None  # recorded against the file as it is


@pytest.mark.parametrize(
    "extra",
    [
        "reward: {kind: contains}\n",
        # A 3-argument check run on each reference answer, seeing that scenario's own answer.
        "reward:\n  kind: check\n  check: |\n    def check(answer, trace, scenario):\n"
        "        if answer != scenario['answer']:\n            raise ValueError('not its own answer')\n"
        "        return 1.0\n",
    ],
)
def test_the_reference_answers_pass_a_contains_reward_and_a_scenario_check(
    settings: Settings, tmp_path: Path, extra: str
) -> None:
    report = validate_mcp_task(settings, write_task(tmp_path, extra=extra), sample=False, timeout_s=120)
    assert report.ok, report.problems
    assert report.mcp is not None


@pytest.mark.parametrize(
    ("extra", "check", "says"),
    [
        ("tools: [capital, teleport]\n", "tools", "does not have: ['teleport']"),
        ("held_out_fraction: 2\n", "taskfile", "held_out_fraction"),
        ("reward: {kind: check, check: 'def check(a, t): return 7'}\n", "reference", "must return a number in [0, 1]"),
        ("reward: {kind: check, check: 'def check(a, t, s): return s[\"nope\"]'}\n", "reference", "KeyError"),
    ],
)
def test_each_problem_names_its_check_and_field(
    settings: Settings, tmp_path: Path, extra: str, check: str, says: str
) -> None:
    report = validate_mcp_task(settings, write_task(tmp_path, extra=extra), sample=False, timeout_s=120)
    assert not report.ok
    assert report.problems[0].check == check and says in report.problems[0].message, report.problems


def test_a_server_that_does_not_start_is_the_problem(settings: Settings, tmp_path: Path) -> None:
    path = write_task(tmp_path)
    path.write_text(path.read_text().replace(str(TINY_SERVER), str(tmp_path / "gone.py")))
    report = validate_mcp_task(settings, path, sample=False, timeout_s=120)
    assert [p.check for p in report.problems] == ["server"] and "failed to start" in report.problems[0].message
    with pytest.raises(UserError, match="does not exist"):
        validate_mcp_task(settings, tmp_path / "nothing.mcp.yaml", sample=False)


def test_the_tools_render_for_the_default_model(home: Path, tmp_path: Path, model_dir: Path) -> None:
    settings = Settings.from_env(make_env(home))  # after model_dir: MCP_RL_MODEL is the model
    report = validate_mcp_task(settings, write_task(tmp_path), sample=True, timeout_s=180)
    assert report.ok, report.problems
    assert report.mcp is not None and report.mcp["rendering"].startswith("fallback")
    assert report.mcp["tools_prompt_tokens"] > 50


def test_the_variables_a_task_file_names_reach_the_environment_process(
    settings: Settings, tmp_path: Path, keys: None
) -> None:
    path = write_task(tmp_path, env_vars="[CAPITALS_EXTRA, TINKER_API_KEY]")
    assert named_variables(path) == ["CAPITALS_EXTRA"]  # our keys never, even named
    bundled = bundled_environments_dir() / "mcp_env.py"
    named = declared_env_vars(bundled, "McpEnv", {"task_file": str(path)})
    assert named == ["CAPITALS_EXTRA"]
    env = settings.user_code_env(named)
    assert env["CAPITALS_EXTRA"] == "yes" and "UNNAMED_SETTING" not in env
    assert not set(env) & set(SECRET_ENV_VARS)
    assert declared_env_vars(bundled, "McpEnv", {"task_file": str(tmp_path / "gone.mcp.yaml")}) == []
    assert declared_env_vars(bundled, "McpEnv") == []


@pytest.mark.anyio
async def test_rl_validate_environment_takes_a_task_files_path(home: Path, tmp_path: Path) -> None:
    path = write_task(tmp_path)
    async with Client(stdio_params(home)) as client:
        answer = await ok(client, "rl_validate_environment", {"name": str(path), "sample_base_model": False})
        assert answer["status"] == "passed", answer
        assert answer["report"]["kind"] == "mcp" and "capital" in answer["report"]["mcp"]["offered"]
        refused = await client.call_tool("rl_validate_environment", {"name": "mcp"})
        assert refused.is_error and "task_file" in str(refused.content), refused
