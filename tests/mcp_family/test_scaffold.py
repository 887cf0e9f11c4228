"""The scaffold writes an MCP task file (rl_new_environment with mcp_command or mcp_url) that
loads and validates as written; bad input changes nothing."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from mcp_rl.environments.mcp_family.taskfile import load
from mcp_rl.environments.scaffold import McpServerGiven, new_mcp_task_file
from mcp_rl.environments.validate import validate_mcp_task
from mcp_rl.errors import UserError
from mcp_rl.settings import Settings
from tests.mcp_family.kit import TINY_SERVER


def test_a_stdio_servers_task_file_is_written_and_validates(settings: Settings) -> None:
    given = McpServerGiven(command=[sys.executable, str(TINY_SERVER)], env_vars=["CAPITALS_EXTRA"])
    made = new_mcp_task_file(settings, "capitals_tools", given)
    path = Path(made.path)
    assert path.name == "capitals_tools.mcp.yaml" and path.parent == settings.user_envs_dir.resolve()
    task = load(path)
    assert task.spec.server.command == sys.executable and task.spec.server.args == [str(TINY_SERVER)]
    assert task.spec.server.env_vars == ["CAPITALS_EXTRA"] and task.train and task.held_out
    assert any("task_file" in call for call in made.next_calls)
    report = validate_mcp_task(settings, path, sample=False, timeout_s=120)
    assert report.ok, report.problems
    assert report.mcp is not None and "wipe" in report.mcp["withheld"]


def test_an_http_servers_task_file(settings: Settings) -> None:
    given = McpServerGiven(url="https://tools.example.com/mcp", auth_env_var="EXAMPLE_TOKEN")
    task = load(new_mcp_task_file(settings, "remote", given).path)
    assert task.spec.server.url == "https://tools.example.com/mcp" and task.spec.server.auth_env_var == "EXAMPLE_TOKEN"


@pytest.mark.parametrize(
    ("name", "given", "says"),
    [
        ("both", McpServerGiven(command=["x"], url="http://h/mcp"), "exactly one of mcp_command"),
        ("neither", McpServerGiven(), "exactly one of mcp_command"),
        ("Bad Name", McpServerGiven(command=["x"]), "not usable"),
        ("badvars", McpServerGiven(command=["x"], env_vars=["NOT-A-NAME"]), "not environment variable names"),
        ("badurl", McpServerGiven(url="ftp://h"), "http(s) URL"),
    ],
)
def test_bad_input_writes_nothing(settings: Settings, name: str, given: McpServerGiven, says: str) -> None:
    with pytest.raises(UserError, match=says.replace("(", r"\(").replace(")", r"\)")):
        new_mcp_task_file(settings, name, given)
    folder = settings.user_envs_dir
    assert not folder.exists() or list(folder.iterdir()) == []


def test_an_existing_file_is_never_replaced(settings: Settings) -> None:
    given = McpServerGiven(command=["x"])
    first = Path(new_mcp_task_file(settings, "twice", given).path)
    before = first.read_text()
    with pytest.raises(UserError, match="exists"):
        new_mcp_task_file(settings, "twice", McpServerGiven(command=["y"]))
    assert first.read_text() == before
