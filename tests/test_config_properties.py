"""Property test of rl_edit_config's core (issue 18) over every editable field of the bundled
environments (arithmetic, and GEM when installed) and every run option.

For any field and any value an agent could send (numbers of every kind including NaN and
infinity, booleans, strings that read as numbers or not, nulls, lists, mappings):
- a refused value raises a UserError and leaves session.json byte for byte as it was;
- an accepted value is stored in session.json as answered, reaches run.yaml, and run.yaml loads
  back into the environment's own config class (and the trainer's settings) with that value.

The environments are introspected, and their config classes run, in this process in place of
the children the server uses (the same `introspect` and `errors_of`), so examples cost
milliseconds. No model is loaded.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from mcp_rl import config
from mcp_rl.config.environment_service import EnvironmentService
from mcp_rl.environments.config_check_child import errors_of
from mcp_rl.environments.discovery import EnvironmentInfo
from mcp_rl.environments.introspect import ConfigSpec
from mcp_rl.errors import UserError
from mcp_rl.runconfig import RunConfig
from mcp_rl.settings import Settings
from tests.conftest import make_env

# Values of every shape an agent may send; strings that YAML reads as numbers or booleans too.
TRICKY_STRINGS = [
    ".nan",
    "NaN",
    "nan",
    "inf",
    ".inf",
    "-.inf",
    "Infinity",
    "1.0e400",
    "true",
    "false",
    "null",
    "3",
    "-1",
    "0.5",
    "1e3",
    "+",
    "*-",
    "",
    " ",
    "[1, 2]",
    "{a: 1}",
    "sglang",
    "default",
]
VALUES = st.one_of(
    st.integers(min_value=-(10**6), max_value=10**6),
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.floats(min_value=0, max_value=2),
    st.integers(min_value=-(10**70), max_value=10**70).map(float),  # whole floats: 3.0, 1e63
    st.booleans(),
    st.none(),
    st.sampled_from(TRICKY_STRINGS),
    st.text(max_size=12),
    st.lists(st.integers(min_value=0, max_value=5), max_size=3),
    st.dictionaries(st.sampled_from(["a", "size", "seed"]), st.integers(0, 9), max_size=2),
)


def _has(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


ENVIRONMENTS = [
    "arithmetic",
    pytest.param("gem", marks=pytest.mark.skipif(not _has("gem"), reason="gem-llm not installed")),
]


@pytest.fixture(scope="module")
def specs() -> dict[str, tuple[EnvironmentInfo, ConfigSpec]]:
    """The bundled environments' config specs, introspected in this process (the test imports
    their config classes anyway; a child per environment would cost seconds)."""
    from mcp_rl.environments.introspect_child import introspect

    catalog = EnvironmentService(Settings.from_env(make_env(Path("/nonexistent-home")))).catalog()
    out = {}
    cwd = os.getcwd()
    try:
        for name in ("arithmetic", "gem"):
            env = catalog.get(name)
            if env is None or (name == "gem" and not _has("gem")):
                continue
            out[name] = (env, ConfigSpec.model_validate(introspect(env.file_path, env.class_name, env.project_root)))
    finally:
        os.chdir(cwd)  # introspection runs config_init() from the environment's project root
    return out


def _config_class(name: str) -> type:
    if name == "arithmetic":
        from mcp_rl.environments.bundled.arithmetic import ArithmeticEnvConfig

        return ArithmeticEnvConfig
    from mcp_rl.environments.bundled.gem_env import GemEnvConfig

    return GemEnvConfig


def _same(stored: Any, answered: Any) -> bool:
    if isinstance(answered, float) and isinstance(stored, (int, float)) and not isinstance(stored, bool):
        return math.isclose(stored, answered, rel_tol=1e-12, abs_tol=0.0)
    return (
        stored == answered
        and type(stored) is type(answered)
        or (
            isinstance(answered, int)
            and not isinstance(answered, bool)
            and isinstance(stored, int)
            and stored == answered
        )
    )


@pytest.mark.parametrize("env_name", ENVIRONMENTS)
def test_any_accepted_value_round_trips_and_any_refused_value_changes_nothing(
    tmp_path: Path, specs: dict[str, tuple[EnvironmentInfo, ConfigSpec]], env_name: str
) -> None:
    settings = Settings.from_env(make_env(tmp_path / "home"))
    settings.ensure_home()
    env, spec = specs[env_name]
    store = config.SessionStore(settings)
    config.select_environment(store, env)
    config_cls = _config_class(env_name)
    locked = config.locked_fields("local").env
    fields = sorted([f.name for f in spec.fields if f.name not in locked] + list(config.RUN_OPTION_NAMES))
    fields.remove("base_model")  # a local folder path: checked against the disk, not a type

    def check(values):
        return errors_of(config_cls, values, list(values))

    outcomes = {"accepted": 0, "refused": 0}
    initial = settings.session_file.read_bytes()

    @hsettings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(field=st.sampled_from(fields), value=VALUES)
    def edit(field: str, value: Any) -> None:
        # Each example starts from the same session, so a failure replays (and shrinks) exactly.
        settings.session_file.write_bytes(initial)
        before = initial
        try:
            result = config.edit_config(settings, store, spec, field, value, whole_config_check=check)
        except UserError as exc:
            outcomes["refused"] += 1
            assert settings.session_file.read_bytes() == before, f"refused {field}={value!r} changed session.json"
            assert len(str(exc)) < 2000
            return
        outcomes["accepted"] += 1
        stored = json.loads(settings.session_file.read_text())
        section = "run_options" if result.kind == "run_option" else "edits"
        assert _same(stored[section][field], result.value), (field, value, stored[section])
        # Into run.yaml and back, then into the environment's own config class.
        run = config.build_run_config(settings, store.read(), spec, "prop1").with_ports(api=40001, inference=40002)
        path = tmp_path / "run.yaml"
        run.dump(path)
        loaded = RunConfig.load(path)
        env_config = config_cls.model_validate(loaded.env)
        if result.kind == "environment":
            dumped = env_config.model_dump(mode="json")[field]
            assert _same(dumped, result.value) or dumped == result.value, (field, value, dumped, result.value)
        else:
            trainer_name = {"total_steps": "num_steps"}.get(field, field)
            if hasattr(loaded.trainer, trainer_name):
                assert _same(getattr(loaded.trainer, trainer_name), getattr(loaded.trainer, trainer_name))
                assert getattr(loaded.trainer, trainer_name) == result.value or field == "backend", (field, value)

    edit()
    # The strategy reaches both sides of the property (a test that only refuses proves little).
    assert outcomes["accepted"] >= 10 and outcomes["refused"] >= 10, outcomes
