"""The scaffold writes a working task file (never over another); the validator, in a child
process, passes it and catches what breaks a task, each with its exception, file and line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from mcp_rl.environments.discovery import scan
from mcp_rl.environments.scaffold import new_task_file
from mcp_rl.environments.validate import start_note, validate, validation_for
from mcp_rl.errors import UserError
from mcp_rl.settings import Settings


def _settings(home: Path, **env: str) -> Settings:
    return Settings.from_env({"MCP_RL_HOME": str(home), **env})


def test_the_scaffold_writes_a_task_that_passes_validation(tmp_path: Path) -> None:
    settings = _settings(tmp_path / "home")
    made = new_task_file(settings, "my_task")
    path = Path(made.path)
    assert path == (tmp_path / "home" / "envs" / "my_task.py").resolve() and made.searched
    assert any("rl_validate_environment" in c for c in made.next_calls)
    env = scan(settings.environment_dirs()).get("my_task")
    assert env is not None and env.kind == "task" and env.class_name == "MyTask"
    assert start_note(settings, path, "my_task") is not None  # never validated yet
    report = validate(settings, env, sample=False)
    assert report.ok, report.problems
    assert report.train_items and report.held_out_items == 200 and report.references_scored
    assert validation_for(settings, path) is not None and start_note(settings, path, "my_task") is None
    path.write_text(path.read_text() + "\n# edited\n")
    assert validation_for(settings, path) is None  # the file changed since it passed
    assert "not validated" in (start_note(settings, path, "my_task") or "")


def test_the_scaffold_refuses_to_overwrite_and_bad_names(tmp_path: Path) -> None:
    folder = tmp_path / "mine"
    settings = _settings(tmp_path / "home", MCP_RL_ENV_PATHS=str(folder))
    made = new_task_file(settings, "larger_number")
    assert Path(made.path).parent == folder.resolve() and made.searched  # the first MCP_RL_ENV_PATHS folder
    before = Path(made.path).read_text()
    with pytest.raises(UserError, match="exists: nothing was written"):
        new_task_file(settings, "larger_number")
    assert Path(made.path).read_text() == before
    for bad in ("Larger", "1task", "my-task", "", "../x"):
        with pytest.raises(UserError, match="name"):
            new_task_file(settings, bad)
    with pytest.raises(UserError, match="relative"):
        new_task_file(settings, "other", "relative/folder")
    elsewhere = new_task_file(settings, "other", str(tmp_path / "elsewhere"))
    assert not elsewhere.searched and "MCP_RL_ENV_PATHS" in elsewhere.notes[0]
    assert sorted(p.name for p in folder.iterdir()) == ["larger_number.py"]  # no temporary file left


def test_mcp_rl_new_env(tmp_path: Path) -> None:
    env = {"MCP_RL_HOME": str(tmp_path / "home"), "PATH": "/usr/bin:/bin"}
    argv = [sys.executable, "-m", "mcp_rl", "new-env", "cli_task"]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert "Wrote " in done.stdout and (tmp_path / "home" / "envs" / "cli_task.py").is_file()
    again = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert again.returncode == 2 and "exists" in again.stderr


BROKEN = {
    "raises": (
        "    def score(self, completion, item):\n        return 1.0 / 0\n",
        "score",
        "ZeroDivisionError",
    ),
    "overlap": (
        "    held_out_seeds = range(5, 7)\n"
        "    def score(self, completion, item):\n        return 1.0 if completion == item['answer'] else 0.0\n",
        "overlap",
        None,
    ),
    "nan": (
        "    def score(self, completion, item):\n        return float('nan')\n",
        "score_range",
        None,
    ),
    "out_of_range": (
        "    def score(self, completion, item):\n        return 2.0\n",
        "score_range",
        None,
    ),
    "no_import": (
        "    def score(self, completion, item):\n        return 0.0\nimport not_a_module_anywhere\n",
        "does not import",
        "ModuleNotFoundError",
    ),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_the_validator_catches_a_broken_task(tmp_path: Path, case: str) -> None:
    body, words, exception = BROKEN[case]
    path = tmp_path / "envs" / "broken.py"
    path.parent.mkdir()
    path.write_text(
        "from mcp_rl.task import Task\n\n\nclass Broken(Task):\n"
        "    train_seeds = range(0, 10)\n"
        "    held_out_seeds = range(100, 110)\n"
        "    def item(self, seed):\n        return {'q': str(seed), 'answer': str(seed)}\n"
        "    def prompt(self, item):\n        return item['q']\n" + body
    )
    settings = _settings(tmp_path / "home", MCP_RL_ENV_PATHS=str(path.parent))
    env = scan(settings.environment_dirs()).get("broken")
    assert env is not None
    report = validate(settings, env, sample=False)
    assert not report.ok
    found = [p for p in report.problems if words in p.message or words == p.check]
    assert found, report.problems
    if exception is not None:
        problem = found[0]
        assert problem.exception is not None and problem.exception.startswith(exception)
        assert problem.file == str(path.resolve()) and problem.line is not None
        line = path.read_text().splitlines()[problem.line - 1]
        assert ("1.0 / 0" in line) if case == "raises" else ("import not_a_module_anywhere" in line)
    assert "broken" in (start_note(settings, path, "broken") or "")
