from pathlib import Path

import pytest

from mcp_rl.config.environment_service import EnvironmentService
from mcp_rl.environments.discovery import ScanCache, parse_file, scan
from mcp_rl.errors import UserError
from mcp_rl.settings import Settings
from tests.conftest import FIXTURES, make_env

GOOD = FIXTURES / "envs" / "good"
BROKEN = FIXTURES / "envs" / "broken"


def test_scan_finds_classes_names_and_descriptions():
    catalog = scan([GOOD])
    by_name = {e.name: e for e in catalog.environments}
    assert set(by_name) == {"counting", "special_counting", "raising", "no_name_env"}
    assert by_name["counting"].class_name == "CountingEnv"
    assert by_name["counting"].description == "Counts things, for tests."
    # A subclass of another environment class of the same file counts too.
    assert by_name["special_counting"].class_name == "SpecialCountingEnv"
    # No `name` attribute: the file stem; `module.BaseEnv` bases are recognised.
    assert by_name["no_name_env"].class_name == "Thing"
    assert catalog.problems == []


def test_broken_file_and_duplicate_are_reported_not_fatal():
    catalog = scan([GOOD, BROKEN])
    assert [p.file_path.name for p in catalog.problems] == ["broken.py"]
    assert "syntax error" in catalog.problems[0].error
    dup = {d.name: d for d in catalog.duplicates}
    assert dup["counting"].used.name == "counting.py"
    assert [p.name for p in dup["counting"].ignored] == ["counting_again.py"]
    # The first one found wins, and files starting with "_" are not scanned.
    assert catalog.get("counting").file_path.parent == GOOD.resolve()
    assert "import_fails" in catalog.names


def test_missing_folder_is_a_problem(tmp_path: Path):
    catalog = scan([tmp_path / "nope"])
    assert catalog.environments == []
    assert "not a folder" in catalog.problems[0].error


def test_cache_reparses_only_changed_files(tmp_path: Path):
    env_file = tmp_path / "one.py"
    env_file.write_text('from x import BaseEnv\nclass A(BaseEnv):\n    name = "a"\n')
    cache = ScanCache()
    assert scan([tmp_path], cache).names == ["a"]
    env_file.write_text('from x import BaseEnv\nclass A(BaseEnv):\n    name = "renamed"\n')
    assert scan([tmp_path], cache).names == ["renamed"]


def test_parse_ignores_non_env_classes(tmp_path: Path):
    path = tmp_path / "plain.py"
    path.write_text("class NotAnEnv(object):\n    name = 'x'\n")
    assert parse_file(path) == []


def test_selecting_a_file_that_failed_to_parse_names_its_problem(tmp_path) -> None:
    """Issue 34: not "Unknown environment", but the file and why it could not be read."""
    service = EnvironmentService(
        Settings.from_env(make_env(tmp_path, MCP_RL_ENV_PATHS=str(BROKEN), MCP_RL_INTROSPECT_WORKER_IDLE="0"))
    )
    with pytest.raises(UserError) as raised:
        service.get("broken")
    message = str(raised.value)
    assert "'broken' is not selectable: its file" in message and "broken.py could not be parsed:" in message
    assert "under `problems`" in message
