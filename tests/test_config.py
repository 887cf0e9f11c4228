import json
import multiprocessing
import shutil
from pathlib import Path

import pytest

from mcp_rl import config
from mcp_rl.config.checks import validate_field
from mcp_rl.config.environment_service import EnvironmentService
from mcp_rl.environments.introspect import ConfigSpec, FieldSpec
from mcp_rl.errors import NotFound, UserError
from mcp_rl.runconfig import EnvironmentRef
from mcp_rl.settings import Settings
from tests.conftest import FIXTURES, make_env


@pytest.fixture(scope="module")
def introspected(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The introspection cache after one select of `counting` (a child importing atroposlib, ~3 s)."""
    home = tmp_path_factory.mktemp("warm-home")
    EnvironmentService(Settings.from_env(make_env(home, MCP_RL_ENV_PATHS=str(FIXTURES / "envs" / "good")))).select(
        "counting"
    )
    return home / "cache"


@pytest.fixture
def service(home: Path, introspected: Path) -> EnvironmentService:
    # The cache is keyed by the environment's files, not the home: each test selects from it.
    shutil.copytree(introspected, home / "cache", dirs_exist_ok=True)
    settings = Settings.from_env(make_env(home, MCP_RL_ENV_PATHS=str(FIXTURES / "envs" / "good")))
    svc = EnvironmentService(settings)
    svc.select("counting")
    return svc


def test_edit_typed_value_and_string_coercion(service):
    assert service.edit("max_count", 50).value == 50
    assert service.edit("max_count", "60").value == 60  # agents often send numbers as strings
    current = {f.name: f for f in service.current().configurable_fields}
    assert current["max_count"].current_value == 60
    assert current["max_count"].default == 20


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("max_count", "many", "Invalid value 'many' for max_count"),
        ("max_count", 1000, "1000 is greater than the maximum of 100"),
        ("max_cuont", 5, "Did you mean max_count"),
        ("max_token_length", 10, "locked"),
        ("openai.server_type", "openai", "locked"),
        ("total_steps", 0, "run option total_steps"),
        ("group_size", 3, "multiple of group_size"),
        ("group_size", 1, "at least 2"),
        ("base_model", "/nowhere/model", "not a local Hugging Face model folder"),
    ],
)
def test_bad_edits_are_refused_and_change_nothing(service, field, value, message):
    before = service.settings.session_file.read_text()
    with pytest.raises(UserError, match=message):
        service.edit(field, value)
    assert service.settings.session_file.read_text() == before


def test_unknown_field_is_not_found(service):
    with pytest.raises(NotFound):
        service.edit("nonsense", 1)


def test_run_options_have_backend_defaults_and_are_editable(service):
    options = {o.name: o for o in service.current().run_options}
    assert service.current().backend == "local"
    assert options["base_model"].current_value == "default"
    assert service.edit("total_steps", "3").value == 3
    assert service.edit("batch_size", 8).value == 8
    options = {o.name: o for o in service.current().run_options}
    assert options["total_steps"].current_value == 3


def test_locked_fields_listed_with_values(service):
    locked = {f.name: f.locked_value for f in service.current().locked_fields}
    assert locked["max_token_length"] == 512  # the local profile
    assert locked["rollout_server_url"] == "derived"
    assert locked["openai.server_type"] == "sglang"


def test_reselect_resets_edits_keeps_run_options(service):
    service.edit("max_count", 70)
    service.edit("total_steps", 4)
    service.select("counting")
    current = service.current()
    assert {f.name: f.current_value for f in current.configurable_fields}["max_count"] == 20
    assert {o.name: o.current_value for o in current.run_options}["total_steps"] == 4


def test_build_run_config_merges_layers(service):
    service.edit("max_count", 42)
    service.edit("total_steps", 3)
    service.edit("batch_size", 8)
    session, spec = service.selected()
    run = config.build_run_config(service.settings, session, spec, "abc123")
    assert run.env["max_count"] == 42
    assert run.env["group_size"] == 4
    assert run.env["total_steps"] == 3 and run.env["batch_size"] == 8
    assert run.env["max_token_length"] == 512
    assert run.env["wandb_name"] == "counting-abc123"
    assert run.env["use_wandb"] is False
    assert run.openai[0]["server_type"] == "sglang"
    assert run.trainer.num_steps == 3 and run.trainer.group_size == 4
    assert run.trainer.wandb.group == "abc123"
    assert run.trainer.held_out_limit is None  # every held-out item unless asked
    bound = run.with_ports(api=4100, inference=4101)
    assert bound.env["rollout_server_url"] == "http://127.0.0.1:4100"
    assert bound.openai[0]["base_url"] == "http://127.0.0.1:4101/v1"


def test_held_out_limit_is_a_run_option_that_reaches_the_trainer(service):
    options = {o.name: o for o in service.current().run_options}
    assert options["held_out_limit"].current_value is None and "held-out" in options["held_out_limit"].description
    assert service.edit("held_out_limit", 20).value == 20
    for bad in (0, -3, 2.5, "many"):
        with pytest.raises(UserError, match="held_out_limit"):
            service.edit("held_out_limit", bad)
    session, spec = service.selected()
    assert config.build_run_config(service.settings, session, spec, "abc123").trainer.held_out_limit == 20


def test_no_secret_in_run_config(home: Path, tmp_path: Path, introspected: Path):
    shutil.copytree(introspected, home / "cache", dirs_exist_ok=True)
    secret = "sk-very-secret-value"
    settings = Settings.from_env(
        make_env(home, MCP_RL_ENV_PATHS=str(FIXTURES / "envs" / "good"), TINKER_API_KEY=secret, WANDB_API_KEY=secret)
    )
    svc = EnvironmentService(settings)
    svc.select("counting")
    session, spec = svc.selected()
    run = config.build_run_config(settings, session, spec, "r1")
    assert run.trainer.backend == "tinker"
    path = tmp_path / "run.yaml"
    run.dump(path)
    assert secret not in path.read_text()
    assert secret not in repr(settings)
    # Without a local tokenizer the environment loads the Tinker model's tokenizer by its hub id.
    assert run.env["tokenizer_name"] == run.trainer.base_model and run.trainer.tokenizer_path is None


def test_a_local_tokenizer_for_tinker_reaches_trainer_and_environment(home: Path, tmp_path: Path, introspected: Path):
    shutil.copytree(introspected, home / "cache", dirs_exist_ok=True)
    settings = Settings.from_env(
        make_env(
            home,
            MCP_RL_ENV_PATHS=str(FIXTURES / "envs" / "good"),
            TINKER_API_KEY="sk-x",
            MCP_RL_TOKENIZER_PATH=str(tmp_path / "tok"),
        )
    )
    svc = EnvironmentService(settings)
    svc.select("counting")
    session, spec = svc.selected()
    run = config.build_run_config(settings, session, spec, "r2")
    local = str((tmp_path / "tok").resolve())
    assert run.trainer.tokenizer_path == local
    assert run.env["tokenizer_name"] == local and run.openai[0]["tokenizer_name"] == local
    assert run.openai[0]["model_name"] == run.trainer.base_model != local  # the model stays Tinker's


def _hammer(home: str, field_value: int) -> None:
    settings = Settings.from_env(make_env(Path(home), MCP_RL_ENV_PATHS=str(FIXTURES / "envs" / "good")))
    svc = EnvironmentService(settings)
    for i in range(20):
        svc.edit("max_count", 1 + (field_value + i) % 90)
        svc.edit("total_steps", 1 + i)


def test_concurrent_writers_never_corrupt(service, home: Path):
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_hammer, args=(str(home), n)) for n in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    data = json.loads(service.settings.session_file.read_text())
    assert data["environment"]["name"] == "counting"
    assert 1 <= data["edits"]["max_count"] <= 90
    assert data["run_options"]["total_steps"] == 20


def test_a_group_change_no_single_order_allows_is_refused_with_the_path_that_works(service):
    service.edit("group_size", 4)
    service.edit("batch_size", 4)
    # 4/4 -> 6/6: group first leaves batch 4, batch first breaks group 4.
    with pytest.raises(UserError, match=r"First set batch_size to 12 .* then group_size to 6"):
        service.edit("group_size", 6)
    with pytest.raises(UserError, match=r"such as 4 or 8"):
        service.edit("batch_size", 6)
    service.edit("batch_size", 12)  # following the message
    service.edit("group_size", 6)
    assert service.edit("batch_size", 6).value == 6


# --- bad values, a damaged session (issue 18 items 2, 6, 8): no introspection child needed ------
def _spec(has_validators: bool | None = False) -> ConfigSpec:
    def field(name: str, type_: str, initial: object, schema: dict) -> FieldSpec:
        return FieldSpec(name=name, type=type_, initial=initial, default=initial, json_schema=schema)

    return ConfigSpec(
        config_class="ToyConfig",
        source="config_init",
        has_validators=has_validators,
        fields=[
            field("temperature", "float", 1.0, {"type": "number", "minimum": 0}),
            field("group_size", "int", 4, {"type": "integer", "minimum": 1}),
            field("min_operand", "int", 1, {"type": "integer", "minimum": 0}),
            field("max_operand", "int", 9, {"type": "integer", "minimum": 1}),
            field("name", "str", "toy", {"type": "string"}),
        ],
    )


@pytest.fixture
def store(settings: Settings) -> config.SessionStore:
    settings.ensure_home()
    store = config.SessionStore(settings)
    ref = EnvironmentRef(name="toy", class_name="Toy", file_path=Path("/nowhere/toy.py"), project_root=Path("/nowhere"))
    store.update(lambda s: s.model_copy(update={"environment": ref}))
    return store


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("temperature", ".nan"),
        ("temperature", float("nan")),
        ("temperature", "inf"),
        ("temperature", ".inf"),
        ("temperature", "-.inf"),
        ("temperature", float("inf")),
        ("learning_rate", "nan"),
        ("learning_rate", float("nan")),
        ("adam_beta1", float("nan")),
        ("adam_beta2", "-inf"),
        ("total_steps", True),
        ("total_steps", "true"),
        ("batch_size", False),
        ("group_size", True),
        ("held_out_limit", True),
    ],
)
def test_non_finite_numbers_and_booleans_are_refused_and_change_nothing(settings, store, field, value):
    before = settings.session_file.read_bytes()
    with pytest.raises(UserError, match="Nothing was changed") as info:
        config.edit_config(settings, store, _spec(), field, value)
    # YAML's spellings (.nan, .inf) are not JSON: refused as not a number at all.
    reasons = ("finite", "boolean", "integer", "not of type")
    assert any(reason in str(info.value) for reason in reasons), info.value
    assert settings.session_file.read_bytes() == before


def test_a_huge_value_is_echoed_as_a_short_prefix(settings, store):
    huge = "9" * 1_000_000
    for field in ("temperature", "total_steps", "no_such_field" * 100_000):
        with pytest.raises(UserError) as info:
            config.edit_config(settings, store, _spec(), field, huge if field != "total_steps" else "x" * 1_000_000)
        assert len(str(info.value)) < 2_000, field


def test_the_config_class_refuses_a_contradiction_and_nothing_changes(settings, store):
    seen: list[dict] = []

    def check(values: dict) -> list[str]:
        seen.append(values)
        return (
            ["ToyConfig: min_operand (20) must not exceed max_operand (9)"]
            if values["min_operand"] > values["max_operand"]
            else []
        )

    before = settings.session_file.read_bytes()
    with pytest.raises(UserError, match=r"ToyConfig refuses .*must not exceed.* Nothing was changed"):
        config.edit_config(settings, store, _spec(has_validators=True), "min_operand", 20, whole_config_check=check)
    assert settings.session_file.read_bytes() == before
    assert seen[-1]["min_operand"] == 20 and seen[-1]["temperature"] == 1.0  # the whole merged config
    config.edit_config(settings, store, _spec(has_validators=True), "max_operand", 30, whole_config_check=check)
    assert (
        config.edit_config(
            settings, store, _spec(has_validators=True), "min_operand", 20, whole_config_check=check
        ).value
        == 20
    )
    # No validators (introspection says so): no check at all.
    config.edit_config(settings, store, _spec(has_validators=False), "min_operand", 50, whole_config_check=check)
    assert seen[-1]["min_operand"] == 20


def _write_session(settings: Settings, data: object) -> None:
    settings.session_file.write_text(json.dumps(data), encoding="utf-8")


def test_unknown_and_bad_run_options_in_session_json_are_noted_and_reset(settings, store):
    data = json.loads(settings.session_file.read_text())
    data["run_options"] = {
        "total_steps": "many",
        "lora_rank": 4,
        "warp_speed": 9,
        "learning_rate": None,
        "batch_size": 8,
    }
    data["edits"] = {"temperature": None, "gone_field": 3, "group_size": 2}
    data["future_key"] = {"x": 1}
    _write_session(settings, data)
    current = config.current_config(settings, store.read(), _spec())
    options = {o.name: o.current_value for o in current.run_options}
    assert options["total_steps"] == 30 and options["learning_rate"] == 5e-4  # the local defaults
    assert options["lora_rank"] == 4 and options["batch_size"] == 8  # good values are kept
    fields = {f.name: f.current_value for f in current.configurable_fields}
    assert fields["temperature"] == 1.0 and fields["group_size"] == 2
    notes = " ".join(current.notes)
    for word in ("warp_speed", "total_steps", "learning_rate", "gone_field", "temperature", "future_key"):
        assert word in notes, word
    # An edit works, writes the repaired session and keeps the one it repaired.
    edit = config.edit_config(settings, store, _spec(), "lora_rank", 16)
    assert edit.value == 16 and "warp_speed" in edit.message
    stored = json.loads(settings.session_file.read_text())
    assert stored["run_options"] == {"lora_rank": 16, "batch_size": 8} and stored["edits"] == {"group_size": 2}
    (kept,) = settings.home.glob("session.before-repair-*.json")
    assert json.loads(kept.read_text())["run_options"]["warp_speed"] == 9
    assert config.current_config(settings, store.read(), _spec()).notes == []


@pytest.mark.parametrize("how", ["garbage", "non-utf8", "directory", "a list", "wrong types", "empty"])
def test_a_damaged_session_json_is_kept_aside_and_a_fresh_one_works(settings, store, how):
    path = settings.session_file
    if how == "garbage":
        path.write_text("{not json")
    elif how == "non-utf8":
        path.write_bytes(b'{"edits": {"name": "\xff\xfe"}}')
    elif how == "directory":
        path.unlink()
        path.mkdir()
    elif how == "a list":
        path.write_text("[1, 2]")
    elif how == "wrong types":
        path.write_text(json.dumps({"environment": 5, "edits": [], "run_options": "fast", "selected_at": "noon"}))
    elif how == "empty":
        path.write_text("")
    session = store.read()
    assert session.environment is None and session.notes, how
    assert "session.json" in session.notes[0]
    if how != "wrong types":
        assert "moved to" in session.notes[0] and list(settings.home.glob("session.damaged-*")), how
    store.update(lambda s: s.model_copy(update={"run_options": {"total_steps": 3}}))
    assert store.read().run_options == {"total_steps": 3} and store.read().notes == []


def test_a_string_field_still_takes_the_word_nan(settings, store):
    assert config.edit_config(settings, store, _spec(), "name", "nan").value == "nan"


@pytest.mark.parametrize(("raw", "expected"), [("0", 0.1), ("-5", 0.1), ("0.5", 0.5), ("1e9", 3600.0), ("", 1.0)])
def test_the_watch_interval_is_bounded(home, raw, expected):
    assert Settings.from_env(make_env(home, MCP_RL_WATCH_INTERVAL=raw)).watch_interval_s == expected


@pytest.mark.parametrize("raw", ["nan", "inf", "-inf"])
def test_non_finite_seconds_in_the_environment_are_refused(home, raw):
    with pytest.raises(ValueError, match="finite number of seconds"):
        Settings.from_env(make_env(home, MCP_RL_WATCH_INTERVAL=raw))


def test_a_run_starts_from_a_session_with_bad_options_using_the_defaults(settings, store):
    data = json.loads(settings.session_file.read_text())
    data["run_options"] = {"total_steps": True, "lora_rank": "wide", "nonsense": 1, "batch_size": 8}
    _write_session(settings, data)
    run = config.build_run_config(settings, store.read(), _spec(), "r1")
    assert run.trainer.num_steps == 30 and run.trainer.lora_rank == 8 and run.trainer.batch_size == 8


def test_a_whole_float_for_an_integer_field_is_stored_as_the_integer(settings, store):
    # JSON schema counts 1e19 as an integer; the config class would refuse the float (beyond 64 bits).
    assert config.edit_config(settings, store, _spec(), "max_operand", 1e19).value == 10**19
    assert json.loads(settings.session_file.read_text())["edits"]["max_operand"] == 10**19
    assert isinstance(config.edit_config(settings, store, _spec(), "temperature", 2.0).value, float)


def test_reselecting_drops_a_bad_stored_option(settings, store):
    data = json.loads(settings.session_file.read_text())
    data["run_options"] = {"lora_rank": -3, "total_steps": 5}
    _write_session(settings, data)
    env = EnvironmentService(settings).get("arithmetic")
    config.select_environment(store, env)
    assert json.loads(settings.session_file.read_text())["run_options"] == {"total_steps": 5}


def test_the_arithmetic_config_class_refuses_min_above_max_at_edit_time(home: Path):
    # The real check: a fork of the warm introspection worker (the server's way), then a one-shot
    # child (no worker). Both run ArithmeticEnvConfig's own model validator on the merged config.
    settings = Settings.from_env(make_env(home, MCP_RL_INTROSPECT_WORKER_IDLE="60"))
    svc = EnvironmentService(settings)
    try:
        svc.select("arithmetic")
        before = settings.session_file.read_bytes()
        with pytest.raises(
            UserError, match=r"min_operand \(21\) must not exceed max_operand \(20\).*Nothing was changed"
        ):
            svc.edit("min_operand", 21)
        assert settings.session_file.read_bytes() == before
        svc.edit("max_operand", 30)
        assert svc.edit("min_operand", 21).value == 21
    finally:
        svc.close()
    one_shot = EnvironmentService(Settings.from_env(make_env(home)))
    assert one_shot.worker is None
    with pytest.raises(UserError, match=r"min_operand \(31\) must not exceed max_operand \(30\)"):
        one_shot.edit("min_operand", 31)


def test_a_field_is_locked_or_editable_never_both(service):
    current = service.current()
    locked = {f.name for f in current.locked_fields}
    options = {o.name for o in current.run_options}
    assert {"total_steps", "batch_size"} <= options and not locked & options
    assert not set(service.locked()["env"]) & options


def test_a_value_config_init_set_that_a_run_option_replaces_is_named(service):
    session = service.store.read()
    spec = service.selected()[1]
    # As the bundled arithmetic does: config_init sets batch_size (the class default is -1).
    field = FieldSpec(name="batch_size", type="integer", default=-1, initial=48, json_schema={"type": "integer"})
    spec = spec.model_copy(update={"fields": [*spec.fields, field]})
    current = config.current_config(service.settings, session, spec)
    (note,) = [n for n in current.notes if "batch_size" in n]
    assert "config_init sets batch_size=48; the run uses the run option batch_size=" in note
    assert "rl_edit_config('batch_size', 48)" in note
    service.edit("batch_size", 48)
    edited = config.current_config(service.settings, service.store.read(), spec)
    assert not [n for n in edited.notes if "batch_size" in n]


def test_a_field_holding_json_text_takes_the_object_or_its_text() -> None:
    # reasoning-gym's `params`: the SDK turns JSON text into an object before the tool sees it.
    params = FieldSpec(name="params", type="string", default="{}", initial="{}", json_schema={"type": "string"})
    value = {"leg_counting": {"max_animals": 4}}
    assert json.loads(validate_field(params, value)) == value
    assert validate_field(params, json.dumps(value)) == json.dumps(value)
    count = FieldSpec(name="n", type="integer", default=1, initial=1, json_schema={"type": "integer"})
    with pytest.raises(UserError, match="Invalid value"):
        validate_field(count, {"n": 2})
