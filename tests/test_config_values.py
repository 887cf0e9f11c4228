"""rl_edit_config's values (issue 43 items 4 and 5): text read as JSON, never YAML; a string field
keeps a string; every value and the whole config size-capped; the revision answered is the one
written under the lock, also when edits race."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from mcp_rl import config
from mcp_rl.config.checks import MAX_CONFIG_BYTES, MAX_VALUE_BYTES
from mcp_rl.environments.introspect import ConfigSpec, FieldSpec
from mcp_rl.errors import UserError
from mcp_rl.runconfig import EnvironmentRef
from mcp_rl.settings import Settings

REF = EnvironmentRef(name="toy", class_name="Toy", file_path=Path("/nowhere/toy.py"), project_root=Path("/nowhere"))
# A YAML "billion laughs" (the probe's was 424 bytes): a few hundred bytes a YAML reader expands into ~10^9 list items.
ALIAS_BOMB = (
    'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
    "b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\n"
    "d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]\ne: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]\n"
    "f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]\ng: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]\n"
    "h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]\ni: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]\n"
)


def _spec() -> ConfigSpec:
    def field(name: str, type_: str, initial: object, schema: dict) -> FieldSpec:
        return FieldSpec(name=name, type=type_, initial=initial, default=initial, json_schema=schema)

    return ConfigSpec(
        config_class="ToyConfig",
        source="config_init",
        has_validators=False,
        fields=[
            field("temperature", "float", 1.0, {"type": "number", "minimum": 0}),
            field("group_size", "int", 4, {"type": "integer", "minimum": 1}),
            field("shuffle", "bool", True, {"type": "boolean"}),
            field("name", "str", "toy", {"type": "string"}),
            field("note", "str | None", None, {"anyOf": [{"type": "string"}, {"type": "null"}]}),
            field("prompt", "str", "", {"type": "string"}),
            field("operations", "list[str]", ["+"], {"type": "array", "items": {"type": "string"}}),
        ],
    )


@pytest.fixture
def store(settings: Settings) -> config.SessionStore:
    settings.ensure_home()
    store = config.SessionStore(settings)
    store.update(lambda s: s.model_copy(update={"environment": REF}))
    return store


def _refused(settings: Settings, store: config.SessionStore, field: str, value: object) -> str:
    before = settings.session_file.read_bytes()
    with pytest.raises(UserError) as info:
        config.edit_config(settings, store, _spec(), field, value)
    assert settings.session_file.read_bytes() == before  # nothing changed
    message = str(info.value)
    assert "Nothing was changed" in message and len(message) < 2_000
    return message


@pytest.mark.parametrize(
    ("field", "text"),
    [
        ("max_cost_usd", "1:30"),  # YAML's base 60: would be $90
        ("total_steps", "0x0A"),  # YAML's hex: would be 10
        ("max_cost_usd", "~"),  # YAML's null: would clear the cost cap
        ("shuffle", "off"),  # YAML 1.1's false
        ("shuffle", "yes"),
        ("temperature", "1_000"),
        ("group_size", "0o17"),
    ],
)
def test_text_is_read_as_json_never_yaml(settings: Settings, store: config.SessionStore, field: str, text: str) -> None:
    if field == "max_cost_usd":
        config.edit_config(settings, store, _spec(), "max_cost_usd", 5)
    message = _refused(settings, store, field, text)
    assert repr(text) in message
    if field == "max_cost_usd":
        assert json.loads(settings.session_file.read_text())["run_options"]["max_cost_usd"] == 5


def test_json_text_is_read_as_json(settings: Settings, store: config.SessionStore) -> None:
    assert config.edit_config(settings, store, _spec(), "max_cost_usd", "12.5").value == 12.5
    assert config.edit_config(settings, store, _spec(), "shuffle", "false").value is False
    assert config.edit_config(settings, store, _spec(), "operations", '["*", "-"]').value == ["*", "-"]


@pytest.mark.parametrize(
    ("field", "value", "stored"),
    [
        ("name", "debug #x", "debug #x"),  # a YAML comment is text
        ("name", "12345", "12345"),
        ("name", "true", "true"),
        ("note", "~", "~"),  # not null
        ("note", "null", "null"),
        ("account", "12345", "12345"),  # a Slurm account made of digits
        ("partition", "2024", "2024"),
        ("account", 12345, "12345"),  # the digits sent as a number: its text
        ("wandb_project", "1e3", "1e3"),
    ],
)
def test_a_string_field_keeps_a_string(
    settings: Settings, store: config.SessionStore, field: str, value: object, stored: str
) -> None:
    result = config.edit_config(settings, store, _spec(), field, value)
    assert result.value == stored
    session = json.loads(settings.session_file.read_text())
    assert {**session["edits"], **session["run_options"]}[field] == stored


def test_a_yaml_alias_bomb_answers_at_once(settings: Settings, store: config.SessionStore) -> None:
    assert len(ALIAS_BOMB.encode()) < 500
    start = time.monotonic()
    for field in ("temperature", "operations", "total_steps", "max_cost_usd"):
        _refused(settings, store, field, ALIAS_BOMB)
    assert config.edit_config(settings, store, _spec(), "name", ALIAS_BOMB).value == ALIAS_BOMB  # text, kept whole
    assert time.monotonic() - start < 5.0  # YAML took 120 s and +950 MB


def test_a_value_over_the_cap_is_refused_with_the_cap(settings: Settings, store: config.SessionStore) -> None:
    five_mb = ["x" * 1000] * 5000
    for field, value in (
        ("operations", five_mb),
        ("operations", json.dumps(five_mb)),
        ("name", "y" * (MAX_VALUE_BYTES + 1)),
        ("wandb_project", "p" * 5_000_000),
    ):
        message = _refused(settings, store, field, value)
        assert "64 KiB" in message and f"{MAX_VALUE_BYTES:,}" in message


def test_the_whole_config_is_capped(settings: Settings, store: config.SessionStore) -> None:
    big = "z" * (MAX_VALUE_BYTES - 100)
    config.edit_config(settings, store, _spec(), "name", big)
    config.edit_config(settings, store, _spec(), "note", big)
    config.edit_config(settings, store, _spec(), "operations", [big[:-10]])
    config.edit_config(settings, store, _spec(), "prompt", big)
    message = _refused(settings, store, "wandb_project", big)
    assert "256 KiB" in message and f"{MAX_CONFIG_BYTES:,}" in message


def test_an_oversized_stored_value_is_dropped_with_a_note() -> None:
    edits, notes = config.clean_edits(_spec(), {"operations": ["x" * 1000] * 5000, "name": "ok"})
    assert edits == {"name": "ok"} and "operations" in notes[0] and len(notes[0]) < 300


def test_each_racing_edit_answers_the_revision_it_wrote(settings: Settings, store: config.SessionStore) -> None:
    """Every edit replaces the only edit, so the config each one wrote is known exactly: its
    answer's revision must be that config's (the revision used to be read after the lock, and 7 of
    10 answers named another edit's config)."""
    barrier = threading.Barrier(10)
    answers: dict[str, str | None] = {}

    def edit(n: int) -> None:
        barrier.wait()
        answers[f"name-{n}"] = config.edit_config(settings, store, _spec(), "name", f"name-{n}").revision

    threads = [threading.Thread(target=edit, args=(n,)) for n in range(10)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert len(answers) == 10
    for value, revision in answers.items():
        assert revision == config.config_revision(config.Session(environment=REF, edits={"name": value})), value
    final = config.Session.model_validate_json(settings.session_file.read_text())
    assert config.config_revision(final) in answers.values()
