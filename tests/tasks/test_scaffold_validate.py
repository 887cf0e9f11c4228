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
    # The shipped template's scorer pays no degenerate reply (issue 44): probed, nothing to warn of.
    assert {p["probe"] for p in report.degenerate_replies or []} == {"empty", "digits", "echo", "constant"}
    assert not any("score range" in w or "earns some credit" in w for w in report.warnings), report.warnings
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
    # A folder outside the searched ones is refused (issue 43 item 6: it used to be written, unlisted).
    with pytest.raises(UserError, match="not inside a folder mcp-rl searches"):
        new_task_file(settings, "other", str(tmp_path / "elsewhere"))
    assert not (tmp_path / "elsewhere").exists()
    inside = new_task_file(settings, "other", str(folder / "sub"))
    assert inside.searched and Path(inside.path).parent == (folder / "sub").resolve()
    assert sorted(p.name for p in folder.iterdir()) == ["larger_number.py", "sub"]  # no temporary file left


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


def test_the_template_is_a_real_module_and_the_copy_names_what_it_defines(tmp_path: Path) -> None:
    """Issue 46: the template is a file lint and type checks read; the instructions name what the
    written file defines."""
    import ast

    from mcp_rl.environments import scaffold

    made = new_task_file(_settings(tmp_path / "home"), "larger_number")
    text = Path(made.path).read_text()
    for token in (
        scaffold.TEMPLATE_NAME,
        scaffold.TEMPLATE_CLASS,
        scaffold.TEMPLATE_TITLE,
        "This file is the template",
    ):
        assert token not in text, token
    tree = ast.parse(text)
    (cls,) = [n for n in tree.body if isinstance(n, ast.ClassDef)]
    defined = {n.name for n in cls.body if isinstance(n, ast.FunctionDef)}
    assert cls.name == "LargerNumber" and 'name = "larger_number"' in text
    assert 'rl_validate_environment("larger_number")' in text
    instructions = " ".join(made.edit)
    for method in ("train_items", "held_out_items", "make", "messages", "score", "metadata"):
        assert method in defined and f"{method}(" in instructions, method
    assert "item(seed)" not in instructions  # the file defines no item()


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("arithmetic", "already listed"),  # a bundled environment's name
        ("json", "standard library"),
        ("sys", "standard library"),
        ("mcp_rl", "mcp-rl imports itself"),
        ("sitecustomize", "Python or mcp-rl imports"),
        ("usercustomize", "Python or mcp-rl imports"),
        ("numpy", "installed package"),
    ],
)
def test_a_name_that_would_shadow_is_refused_with_a_free_one(tmp_path: Path, name: str, why: str) -> None:
    settings = _settings(tmp_path / "home")
    with pytest.raises(UserError, match=why) as info:
        new_task_file(settings, name)
    suggested = str(info.value).split("e.g. '")[1].split("'")[0]
    assert not (tmp_path / "home" / "envs" / f"{name}.py").exists()
    assert Path(new_task_file(settings, suggested).path).name == f"{suggested}.py"  # the suggestion is free


@pytest.mark.parametrize(
    ("folder", "why"),
    [
        ("/", "not inside a folder mcp-rl searches"),
        ("~", "not inside a folder mcp-rl searches"),
        ("/tmp/x\x00y", "NUL byte"),
        ("/" + "a" * 5000, "characters long"),
        ("relative/x", "relative"),
    ],
)
def test_a_folder_outside_the_searched_ones_is_refused_with_a_reason(tmp_path: Path, folder: str, why: str) -> None:
    settings = _settings(tmp_path / "home")
    with pytest.raises(UserError, match=why) as info:
        new_task_file(settings, "my_task", folder)
    assert len(str(info.value)) < 1_000 and "Nothing was written" in str(info.value)
    assert not (tmp_path / "home" / "envs").exists()
