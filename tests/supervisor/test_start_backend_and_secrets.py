"""rl_start_training's backend follows the configuration, and no key ever reaches argv or files.

The Tinker key here is fake and its base URL points at a closed local port: the run is stopped
as soon as its processes exist (no training happens; Tinker is never contacted)."""

from __future__ import annotations

from pathlib import Path

import psutil

from mcp_rl.config.environment_service import EnvironmentService
from mcp_rl.settings import Settings
from mcp_rl.supervisor import service
from mcp_rl.supervisor.states import RunState
from tests.conftest import make_env
from tests.kit.wait import wait_for

FAKE_KEY = "tml-fake-key-never-in-argv-or-files-3141592653"


def _selected(settings: Settings) -> EnvironmentService:
    environments = EnvironmentService(settings)
    environments.select("arithmetic")
    return environments


def test_a_tinker_key_selects_the_tinker_backend_and_stays_out_of_argv_and_files(home: Path) -> None:
    settings = Settings.from_env(make_env(home, TINKER_API_KEY=FAKE_KEY, TINKER_BASE_URL="http://127.0.0.1:9"))
    started = service.start_run(settings, _selected(settings))
    try:
        assert started.backend == "tinker"
        registry = service.registry_for(settings)
        # Wait until the supervisor has started at least the API (and usually the trainer).
        wait_for(lambda: any(p.pid for p in registry.processes(started.run_id)), 60, "the run's first process")
        run = registry.get_run(started.run_id)
        pids = [run.supervisor_pid, *(p.pid for p in registry.processes(started.run_id) if p.pid)]
        for pid in pids:
            try:
                assert FAKE_KEY not in " ".join(psutil.Process(pid).cmdline())
            except psutil.NoSuchProcess:
                continue
    finally:
        result = service.stop_run(settings, started.run_id)
    assert result.processes_left == []
    for path in Path(run.run_dir).rglob("*"):
        if path.is_file():
            assert FAKE_KEY not in path.read_text(errors="replace"), path
    for db_file in settings.home.glob("state.db*"):  # the database and its WAL
        assert FAKE_KEY.encode() not in db_file.read_bytes(), db_file


def test_without_a_key_the_local_backend_is_used(home: Path) -> None:
    settings = Settings.from_env(make_env(home))
    started = service.start_run(settings, _selected(settings))
    try:
        assert started.backend == "local" and started.status == RunState.STARTING
        assert Path(started.config_path).is_file()
        assert set(started.logs) == {"api", "trainer", "env", "supervisor"}
    finally:
        result = service.stop_run(settings, started.run_id)
    assert result.status == RunState.STOPPED and result.processes_left == [] and result.ports_in_use == []
