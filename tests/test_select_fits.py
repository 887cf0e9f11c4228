"""A selection always leaves a startable config: run options carried over from another family's
edits that no longer fit (batch_size not a multiple of the new group_size, an eval_metric of the
last environment) are adjusted or reset, the answer says which, and the config passes the checks
rl_start_training makes (build_run_config and the start's own validation)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mcp_rl.config import build_run_config
from mcp_rl.config.environment_service import EnvironmentService
from mcp_rl.settings import Settings
from mcp_rl.supervisor.start import _validate
from tests.conftest import FIXTURES, make_env

# Every bundled family, each selected after the one before it (the last after the first).
FAMILIES = ("arithmetic", "gsm8k", "reasoning_gym", "gem", "verifiers:small_sums", "openenv:guess_number")


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("fits")
    for family in ("verifiers-0.4.0", "openenv-0.10.0"):
        # A made interpreter (its state file and python), so selecting starts no build here.
        made = root / "fam" / family
        (made / "venv" / "bin").mkdir(parents=True)
        (made / "venv" / "bin" / "python").symlink_to(Path("/bin/true"))
        (made / "family.json").write_text(json.dumps({"state": "ready", "seconds": 1.0}))
    home = root / "home"
    home.mkdir()
    paths = f"{FIXTURES / 'verifiers_tasks'}:{FIXTURES / 'openenv_guess'}"
    settings = Settings.from_env(make_env(home, MCP_RL_ENV_PATHS=paths, MCP_RL_FAMILIES_DIR=str(root / "fam")))
    svc = EnvironmentService(settings)
    yield svc
    svc.close()


def _group(svc: EnvironmentService) -> int:
    return int({f.name: f.current_value for f in svc.current().configurable_fields}["group_size"])


def _startable(svc: EnvironmentService) -> None:
    session, spec = svc.selected()
    config = build_run_config(svc.settings, session, spec, "r1")
    _validate(config, svc.settings)
    assert config.trainer.batch_size % config.trainer.group_size == 0


@pytest.mark.parametrize("index", range(len(FAMILIES)))
def test_selecting_a_family_after_another_familys_edits_leaves_a_startable_config(
    service: EnvironmentService, index: int
) -> None:
    before, after = FAMILIES[index - 1], FAMILIES[index]
    service.select(before)
    group = _group(service)
    # The smallest batch the last family allows, and a metric only its evaluate() reports.
    service.edit("batch_size", group)
    service.edit("eval_metric", "eval/only_here")
    _startable(service)
    result = service.select(after)
    new_group = _group(service)
    options = {o.name: o.current_value for o in service.current().run_options}
    if group % new_group:
        assert options["batch_size"] == new_group * -(-group // new_group)
        assert f"batch_size {group} (carried over) is not a multiple" in result.message
        assert any("batch_size" in a for a in result.adjusted)
    else:
        assert options["batch_size"] == group and not any("batch_size" in a for a in result.adjusted)
    assert options["eval_metric"] is None and any("eval_metric" in a for a in result.adjusted)
    _startable(service)


def test_reselecting_the_same_environment_keeps_what_fits(service: EnvironmentService) -> None:
    service.select("gsm8k")
    service.edit("batch_size", 24)
    service.edit("eval_metric", "accuracy")
    result = service.select("gsm8k")
    options = {o.name: o.current_value for o in service.current().run_options}
    assert (options["batch_size"], options["eval_metric"], result.adjusted) == (24, "accuracy", [])
