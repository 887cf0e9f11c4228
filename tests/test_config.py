import json
import multiprocessing
from pathlib import Path

import pytest

from mcp_rl import config
from mcp_rl.environments.service import EnvironmentService
from mcp_rl.errors import NotFound, UserError
from mcp_rl.settings import Settings
from tests.conftest import FIXTURES, make_env


@pytest.fixture
def service(home: Path) -> EnvironmentService:
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
    bound = run.with_ports(api=4100, inference=4101)
    assert bound.env["rollout_server_url"] == "http://127.0.0.1:4100"
    assert bound.openai[0]["base_url"] == "http://127.0.0.1:4101/v1"


def test_no_secret_in_run_config(home: Path, tmp_path: Path):
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
