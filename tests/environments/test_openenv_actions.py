"""OpenEnv: the model's answer into an action, observations into text, folders into entries."""

from __future__ import annotations

from pathlib import Path

import pytest

from mcp_rl.environments.openenv_actions import ActionError, observation_text, parse_action
from mcp_rl.environments.openenv_catalog import find_folders
from tests.conftest import FIXTURES

GUESS = {"type": "object", "properties": {"guess": {"type": "integer"}}, "required": ["guess"]}
TWO = {
    "type": "object",
    "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}},
    "required": ["x", "y"],
}


@pytest.mark.parametrize(
    ("answer", "schema", "action"),
    [
        ('{"guess": 3}', GUESS, {"guess": 3}),
        ('I think ```json\n{"x": 1, "y": 2}\n``` is it', TWO, {"x": 1, "y": 2}),
        ('```\n{"x": 0, "y": 5}\n```', TWO, {"x": 0, "y": 5}),
        ("\\boxed{3", GUESS, {"guess": 3}),  # a prefilled \boxed{ cut at its stop
        ("\\boxed{4}", GUESS, {"guess": 4}),
        ("my guess is 2", GUESS, {"guess": 2}),
    ],
)
def test_answers_become_actions(answer: str, schema: dict, action: dict) -> None:
    assert parse_action(answer, schema) == action


@pytest.mark.parametrize(("answer", "schema"), [("no number here", GUESS), ("x is 1 and y is 2", TWO)])
def test_an_answer_that_is_no_action_says_why(answer: str, schema: dict) -> None:
    with pytest.raises(ActionError):
        parse_action(answer, schema)


def test_the_first_observation_says_the_form_of_a_move() -> None:
    from mcp_rl.environments.openenv_actions import action_hint

    assert action_hint(GUESS) == "Answer with your guess: a whole number."
    assert action_hint(TWO) == 'Answer with a JSON object with the fields "x", "y".'


def test_observations_show_their_text_or_their_fields() -> None:
    assert observation_text({"feedback": "go higher", "metadata": {}}) == "go higher"
    assert observation_text({"board": [1, 2], "turn": "x"}) == '{"board": [1, 2], "turn": "x"}'


def test_openenv_folders_are_found_by_their_manifest(tmp_path: Path) -> None:
    (tmp_path / "envs" / "b" / ".venv").mkdir(parents=True)
    (tmp_path / "envs" / "b" / ".venv" / "openenv.yaml").write_text("name: hidden\n")
    assert find_folders([FIXTURES / "openenv_guess"]) == [("guess_number", (FIXTURES / "openenv_guess").resolve())]
    assert find_folders([FIXTURES.parent / "fixtures", tmp_path]) == [
        ("guess_number", (FIXTURES / "openenv_guess").resolve())
    ]


def test_an_openenv_folder_is_listed_and_selected_with_its_folder_preset(home: Path, tmp_path: Path) -> None:
    import json

    from mcp_rl.config.environment_service import EnvironmentService
    from mcp_rl.settings import Settings
    from tests.conftest import make_env

    # A made interpreter (its state file and python), so selecting starts no build here.
    made = tmp_path / "fam" / "openenv-0.10.0"
    (made / "venv" / "bin").mkdir(parents=True)
    (made / "venv" / "bin" / "python").symlink_to(Path("/bin/true"))
    (made / "family.json").write_text(json.dumps({"state": "ready", "seconds": 1.0}))
    settings = Settings.from_env(
        make_env(home, MCP_RL_ENV_PATHS=str(FIXTURES / "openenv_guess"), MCP_RL_FAMILIES_DIR=str(tmp_path / "fam"))
    )
    service = EnvironmentService(settings)
    try:
        names = service.catalog().names
        assert "openenv:guess_number" in names and "openenv" in names
        result = service.select("openenv:guess_number")
        assert result.preset == {"openenv_dir": str((FIXTURES / "openenv_guess").resolve())}
        fields = {f.name: f.current_value for f in service.current().configurable_fields}
        assert fields["openenv_dir"] == str((FIXTURES / "openenv_guess").resolve())
        assert "being made" not in result.message
    finally:
        service.close()
