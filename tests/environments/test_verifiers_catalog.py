"""verifiers tasksets on MCP_RL_ENV_PATHS: found by source, named as verifiers' loader names them,
selected as the bundled verifiers environment with the taskset preset (nothing imports verifiers)."""

from __future__ import annotations

import json
from pathlib import Path

from mcp_rl.environments.verifiers_catalog import find_tasksets, taskset_id
from tests.conftest import FIXTURES, make_env

TASKSETS = (FIXTURES / "verifiers_tasks").resolve()


def test_ids_are_verifiers_module_names() -> None:
    assert taskset_id("primeintellect/small-sums@0.1.2") == "small_sums"
    assert taskset_id("Small-Sums") == "small_sums"


def test_tasksets_are_found_by_source(tmp_path: Path) -> None:
    (tmp_path / "not_one.py").write_text("import verifiers\nx = 1\n")
    (tmp_path / "single_file.py").write_text("import verifiers.v1 as vf\nclass T(vf.Taskset[A, B]):\n    pass\n")
    assert find_tasksets([TASKSETS, tmp_path]) == [("single_file", tmp_path.resolve()), ("small_sums", TASKSETS)]


def test_a_taskset_is_listed_and_selected_with_its_preset(home: Path, tmp_path: Path) -> None:
    from mcp_rl.config.environment_service import EnvironmentService
    from mcp_rl.settings import Settings

    made = tmp_path / "fam" / "verifiers-0.4.0"
    (made / "venv" / "bin").mkdir(parents=True)
    (made / "venv" / "bin" / "python").symlink_to(Path("/bin/true"))
    (made / "family.json").write_text(json.dumps({"state": "ready", "seconds": 1.0}))
    settings = Settings.from_env(
        make_env(home, MCP_RL_ENV_PATHS=str(TASKSETS), MCP_RL_FAMILIES_DIR=str(tmp_path / "fam"))
    )
    service = EnvironmentService(settings)
    try:
        assert "verifiers:small_sums" in service.catalog().names
        result = service.select("verifiers:small_sums")
        assert result.class_name == "VerifiersEnv"
        assert result.preset == {"taskset": "small_sums", "taskset_paths": str(TASKSETS)}
        fields = {f.name: f.current_value for f in service.current().configurable_fields}
        assert fields["taskset"] == "small_sums" and fields["taskset_paths"] == str(TASKSETS)
    finally:
        service.close()
