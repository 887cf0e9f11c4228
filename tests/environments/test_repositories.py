"""Environments as people keep them: whole repositories, listed, selected and loaded.

The fixture `tests/fixtures/repos/research_repo` is shaped like a real repository of Atropos
environments (see its README); other trees are generated where a shape cannot be committed
(`.git`, `node_modules`) or must be big.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mcp_rl.config.environment_service import EnvironmentService
from mcp_rl.environments.dependencies import ImportChecker, missing_dependency
from mcp_rl.environments.discovery import candidate_files, scan
from mcp_rl.environments.introspect_worker import IntrospectionWorker, introspection_env
from mcp_rl.environments.loader import package_location
from mcp_rl.errors import UserError
from mcp_rl.settings import Settings
from tests.conftest import FIXTURES, REPO, make_env

REPO_FIXTURE = FIXTURES / "repos" / "research_repo"
ENVS = REPO_FIXTURE / "environments"
ENV_SOURCE = 'from atroposlib.envs.base import BaseEnv\nclass E(BaseEnv):\n    name = "{name}"\n'
# The warm introspection worker (tests turn it off by default, see make_env).
WORKER_ON = {"MCP_RL_INTROSPECT_WORKER_IDLE": "120"}


def _service(home: Path, **extra: str) -> EnvironmentService:
    settings = Settings.from_env(make_env(home, MCP_RL_ENV_PATHS=str(ENVS), **WORKER_ON, **extra))
    settings.ensure_home()
    return EnvironmentService(settings)


def test_nested_repository_is_listed_with_selectable_names():
    catalog = scan([ENVS])
    names = catalog.names
    assert set(names) == {
        "packaged_arithmetic",
        "letter_counting",
        "counter",
        "game_environments/counter/counter",
        "multilingual",
        "needs_fields",
        "browse",  # derives from an atroposlib base class newer than the installed release
    }
    # Never searched: tests/ and a virtualenv (any folder with pyvenv.cfg).
    assert not {"shadow_test", "venv_only"} & {e.name for e in catalog.environments}
    # Same name in two folders: the shallowest/first keeps the plain name, both have qualified ones.
    (dup,) = catalog.duplicates
    assert dup.name == "counter" and dup.used_as == "community/counter/counter"
    assert dup.others_as == ["game_environments/counter/counter"]
    assert catalog.get("counter").file_path.parts[-3] == "community"
    assert catalog.get("community/counter/counter") == catalog.get("counter")
    assert catalog.get("game_environments/counter/counter").file_path.parts[-3] == "game_environments"
    assert catalog.problems == [] and catalog.limits_hit == []


def test_static_dependency_check_names_the_missing_module_without_importing():
    catalog = scan([ENVS])
    checker = ImportChecker()
    missing = {e.select_name: checker.missing(e) for e in catalog.environments}
    assert missing["multilingual"] == ["langdetect"]
    # Installed (yaml, openai, atroposlib, mcp_rl) and the package's own modules are satisfied.
    assert missing["packaged_arithmetic"] == [] and missing["letter_counting"] == []
    assert "langdetect" not in sys.modules


def test_missing_dependency_says_package_requirements_and_command(tmp_path: Path):
    env_file = ENVS / "community" / "multilingual" / "multilingual_env.py"
    dep = missing_dependency("langdetect", env_file, REPO_FIXTURE)
    text = dep.sentence("multilingual")
    assert f"{sys.executable} -m pip install langdetect" in text
    assert f"-m pip install -r {env_file.parent / 'requirements.txt'}" in text
    assert missing_dependency("sklearn.metrics", env_file, REPO_FIXTURE).package == "scikit-learn"
    assert missing_dependency("yaml", env_file, REPO_FIXTURE).package == "pyyaml"


def test_skipped_folders_and_limits_are_reported(tmp_path: Path):
    root = tmp_path / "repo"
    for folder in (".git/hooks", "node_modules/pkg", "__pycache__", "lib/site-packages/x", "myvenv", "a/b/c/d"):
        (root / folder).mkdir(parents=True)
        (root / folder / "env_here.py").write_text(ENV_SOURCE.format(name=folder.replace("/", "_")))
    (root / "myvenv" / "pyvenv.cfg").write_text("home = /usr\n")
    (root / "top_env.py").write_text(ENV_SOURCE.format(name="top"))
    assert scan([root]).names == ["top", "a_b_c_d"]
    files, limits = candidate_files(root, max_depth=3)
    assert [f.name for f in files] == ["top_env.py"]
    assert "deeper than 3 levels" in limits[0] and str(root / "a" / "b" / "c" / "d") in limits[0]
    for i in range(5):
        (root / f"extra_{i}.py").write_text("x = 1\n")
    files, limits = candidate_files(root, max_files=3)
    assert len(files) == 3 and "Stopped after 3 .py files" in limits[0]


def test_package_location_follows_init_files_and_relative_imports(tmp_path: Path):
    assert package_location(ENVS / "arith_pkg" / "packaged_env.py") == (ENVS, "arith_pkg.packaged_env")
    assert package_location(ENVS / "community" / "counter" / "counter_env.py") is None
    # No __init__.py, but `from ..shared import x`: a namespace package two levels deep.
    deep = tmp_path / "top" / "mid" / "leaf"
    deep.mkdir(parents=True)
    (deep / "env.py").write_text("from ..shared import x\n")
    assert package_location(deep / "env.py") == (tmp_path / "top", "mid.leaf.env")


def test_selecting_every_environment_of_the_repository(home: Path):
    """One warm worker describes them all: packaged (relative imports, an import-time client,
    configs/ read from the repository root), configs/ next to the file, required fields,
    a missing dependency, and a duplicate by its qualified name."""
    service = _service(home)
    try:
        service.catalog()  # starts the worker
        packaged = service.select("packaged_arithmetic")
        assert packaged.config_source == "config_init", packaged.fallback_reason
        spec = service.spec(service.get("packaged_arithmetic"))
        assert spec.field("max_operand").initial == 5 and spec.field("problem_seed").initial == 3
        assert spec.working_dir == REPO_FIXTURE

        letters = service.select("letter_counting")
        assert letters.config_source == "config_init", letters.fallback_reason
        session = service.store.read()
        # Its config_init() reads configs/ next to the file: that folder is where it runs.
        assert session.environment.project_root == ENVS / "letter_counting_environment"
        assert service.current().environment == "letter_counting"

        needs = service.select("needs_fields")
        assert needs.config_source == "fallback" and needs.config_class == "NeedsFieldsConfig"
        assert "required fields without defaults (judge_url)" in needs.fallback_reason

        with pytest.raises(UserError) as err:
            service.select("multilingual")
        text = str(err.value)
        assert "needs the Python module 'langdetect'" in text and "requirements.txt" in text
        assert f"{sys.executable} -m pip install langdetect" in text
        assert service.store.read().environment.name == "needs_fields"  # a failed select changes nothing

        with pytest.raises(UserError, match="needs a different version of atroposlib.*StatefulToolEpisodeEnv"):
            service.select("browse")

        other = service.select("game_environments/counter/counter")
        assert other.environment == "game_environments/counter/counter"
        spec = service.spec(service.get("game_environments/counter/counter"))
        assert spec.field("origin").initial == "game_environments"
        assert service.spec(service.get("counter")).field("origin").initial == "community"
    finally:
        service.close()


def test_a_restarted_server_selects_from_the_disk_cache_and_package_edits_invalidate(home: Path, tmp_path: Path):
    import shutil

    repo = tmp_path / "repo"
    shutil.copytree(REPO_FIXTURE, repo)
    settings = Settings.from_env(make_env(home, MCP_RL_ENV_PATHS=str(repo / "environments"), **WORKER_ON))
    settings.ensure_home()
    first = EnvironmentService(settings)
    try:
        start = time.perf_counter()
        first.select("packaged_arithmetic")
        described_s = time.perf_counter() - start
    finally:
        first.close()
    restarted = EnvironmentService(settings)
    try:
        start = time.perf_counter()
        restarted.select("packaged_arithmetic")
        cached_s = time.perf_counter() - start
        # Against the first selection, which described it in a child (the machine's speed cancels out).
        assert cached_s < described_s / 4, (cached_s, described_s)
        # A sibling module of its package changed: described again (and the change is seen).
        prompts = repo / "environments" / "arith_pkg" / "prompts.py"
        prompts.write_text(prompts.read_text() + "\nEXTRA = 1\n")
        os.utime(prompts, ns=(time.time_ns(), time.time_ns() + 10**9))
        config_file = repo / "configs" / "packaged.yaml"
        config_file.write_text("max_operand: 7\nproblem_seed: 3\n")
        spec = restarted.spec(restarted.get("packaged_arithmetic"))
        assert spec.field("max_operand").initial == 7
    finally:
        restarted.close()


def test_worker_deadline_kills_the_child_and_survives(home: Path, tmp_path: Path):
    settings = Settings.from_env(make_env(home, **WORKER_ON))
    folder = tmp_path / "slow"
    folder.mkdir()
    (folder / "slow.py").write_text(
        "import time\nfrom atroposlib.envs.base import BaseEnv\n"
        "class Slow(BaseEnv):\n    name = 'slow'\n"
        "    @classmethod\n    def config_init(cls):\n        time.sleep(60)\n"
    )
    (folder / "quick.py").write_text(ENV_SOURCE.format(name="quick"))
    settings.ensure_home()
    worker = IntrospectionWorker(settings)
    try:
        catalog = scan([folder])
        worker.request(catalog.get("quick").file_path, "E", folder, 60.0)  # warm
        slow = catalog.get("slow")
        start = time.perf_counter()
        answer = worker.request(slow.file_path, slow.class_name, folder, 1.0)
        assert answer["timeout"] is True and time.perf_counter() - start < 10.0  # the 1 s deadline, not the 60 s sleep
        quick = worker.request(catalog.get("quick").file_path, "E", folder, 10.0)
        assert quick["ok"] is True, quick
        pid = worker.pid
    finally:
        worker.close()
    assert pid is not None and worker.pid is None
    assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text().lower()


def test_introspection_gets_no_secret(home: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("SOME_SERVICE_API_KEY", "user-secret")
    monkeypatch.setenv("OPENAI_API_KEY", "user-openai-secret")
    settings = Settings.from_env(make_env(home, TINKER_API_KEY="tk-secret", OPENROUTER_API_KEY="or-secret"))
    env = introspection_env(settings)
    assert not {"TINKER_API_KEY", "OPENROUTER_API_KEY", "SOME_SERVICE_API_KEY"} & set(env)
    assert env["OPENAI_API_KEY"] != "user-openai-secret"  # a placeholder: import-time clients construct


def test_runner_reports_a_missing_dependency_in_one_line():
    env_file = ENVS / "community" / "multilingual" / "multilingual_env.py"
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "mcp_rl.environments.runner",
            str(env_file),
            "MultilingualEnv",
            "--project-root",
            str(REPO_FIXTURE),
            "process",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )
    assert out.returncode == 2
    assert out.stderr.strip().count("\n") == 0, out.stderr
    assert "pip install langdetect" in out.stderr and "requirements.txt" in out.stderr


def test_runner_fallback_config_fills_required_fields_from_the_run_values():
    from atroposlib.envs.base import BaseEnv, BaseEnvConfig
    from pydantic import Field

    from mcp_rl.environments.runner import fallback_config

    class Needs(BaseEnvConfig):
        judge_url: str = Field(description="required")

    class Env(BaseEnv):
        env_config_cls = Needs

    with pytest.raises(ValueError, match="requires judge_url"):
        fallback_config(Env, {"group_size": 2})
    config = fallback_config(Env, {"judge_url": "http://x", "group_size": 2, "not_a_field": 1})
    assert isinstance(config, Needs) and config.judge_url == "http://x" and config.group_size == 2
    # Atropos's CLI builds its flags from the class: the required field now has a default.
    assert not type(config).model_fields["judge_url"].is_required()


def _workers_of(home: Path) -> list[int]:
    import psutil

    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        try:
            if "--worker" in (proc.info["cmdline"] or []) and proc.environ().get("MCP_RL_HOME") == str(home):
                found.append(proc.info["pid"])
        except psutil.Error:
            continue
    return found


@pytest.mark.anyio
async def test_the_server_stops_its_worker_when_it_stops(home: Path):
    from mcp import Client

    from mcp_rl.server import build_server

    server = build_server(Settings.from_env(make_env(home, MCP_RL_ENV_PATHS=str(ENVS), **WORKER_ON)))
    async with Client(server) as client:
        listed = await client.call_tool("rl_list_environments", {})
        assert not listed.is_error
        assert len(_workers_of(home)) == 1  # started by the listing, warming up for a select
    assert _workers_of(home) == []
