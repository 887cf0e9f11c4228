"""Deadlines and endings of an inference test: a hanging model, the early answer, cancellation,
a worker that dies. OpenRouter is the FAKE on loopback; the processes are real."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import anyio
import psutil
import pytest
from pydantic import SecretStr

from mcp_rl.config.environment_service import EnvironmentService
from mcp_rl.inference_test import service
from mcp_rl.inference_test.models import WORKER_FILE, WorkerRecord
from mcp_rl.settings import Settings
from tests.fakes.fake_openrouter import FakeOpenRouter
from tests.kit.smoke_tests import ENV_NAME, ENV_PATHS
from tests.kit.wait import wait_for_async

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

GOOD, HANG, EMPTY = "fake/good-model", "fake/hanging-model", "fake/silent-model"


def _settings(home: Path, fake: FakeOpenRouter) -> Settings:
    return Settings(
        home=home,
        env_paths=ENV_PATHS,
        model_path=Path(os.environ["MCP_RL_MODEL"]),
        openrouter_api_key=SecretStr("sk-or-FAKE-deadlines"),
        openrouter_base_url=fake.base_url,
    )


def _environment(settings: Settings):
    environments = EnvironmentService(settings)
    environments.select(ENV_NAME)
    return service.session_environment(environments)


def _processes_under(folder: Path) -> list[str]:
    found = []
    for proc in psutil.process_iter(["pid", "cmdline", "status"]):
        cmdline = " ".join(proc.info.get("cmdline") or [])
        if str(folder) in cmdline and proc.info.get("status") != psutil.STATUS_ZOMBIE:
            found.append(f"{proc.info['pid']} {cmdline[:150]}")
    return found


async def _until(predicate, timeout_s: float, what: str) -> None:
    async def holds() -> bool:
        return bool(predicate())

    await wait_for_async(holds, timeout_s, what, interval=0.2)


# Long enough for a model's environment process to start on a loaded 2-core machine and for the
# good model to finish; every second of it is waited out by the hanging model.
HANG_DEADLINE_S = 35


async def test_a_hanging_model_is_killed_at_its_deadline_a_silent_one_stops_early_the_rest_finishes(home: Path) -> None:
    with FakeOpenRouter(behaviours={HANG: "hang", EMPTY: "silent"}, hang_s=600) as fake:
        settings = _settings(home, fake)
        env_ref, env_config = _environment(settings)
        started = service.start_test(
            settings,
            env_ref,
            env_config,
            num_steps=1,
            group_size=2,
            models=[GOOD, HANG, EMPTY],
            model_timeout_s=HANG_DEADLINE_S,
        )
        early = await service.wait_for_test(settings, started.test_id, 1.0)
        assert early.state == "running"
        assert "Still running" in early.message and f"rl://tests/{started.test_id}" in early.message

        done = await service.wait_for_test(settings, started.test_id, 180)
    assert done.state == "completed"
    good, hang, silent = done.models_tested
    assert good.state == "succeeded" and good.total_completions == 2
    assert hang.state == "timed_out" and "killed" in (hang.error or "") and hang.log_tail is not None
    # Empty answers make the environment drop every group and Atropos retry forever: the gateway
    # stops the model after a group's worth of them, long before its deadline.
    assert silent.state == "failed" and "every answer was empty" in (silent.error or "")
    # What the environment made of the empty answers is added when its log says it by the time the
    # gateway stops the model: a race (CI saw it lose once), so it is checked only when present.
    if "rejected" in silent.error:
        assert "groups built from this model's answers" in silent.error, silent.error
    assert silent.usage is not None and silent.usage.requests <= silent.usage.request_budget
    # Its state says the gateway, not the deadline, ended it; its time includes its environment
    # process's start (up to ~25 s on a loaded 2-core machine), so only "before the deadline" is firm.
    assert silent.elapsed_s is not None and silent.elapsed_s < HANG_DEADLINE_S - 1
    assert hang.elapsed_s is not None and hang.elapsed_s >= HANG_DEADLINE_S - 1
    assert {HANG, EMPTY} <= fake.models_seen()
    assert done.summary.environment_working is True and done.summary.best_model == GOOD
    await _until(lambda: not _processes_under(home / "tests" / started.test_id), 15, "the test's processes to end")


async def test_cancelling_the_worker_ends_its_models(home: Path) -> None:
    with FakeOpenRouter(behaviours={HANG: "hang"}, hang_s=600) as fake:
        settings = _settings(home, fake)
        env_ref, env_config = _environment(settings)
        started = service.start_test(
            settings, env_ref, env_config, num_steps=1, group_size=2, models=[HANG], model_timeout_s=300
        )
        await _until(lambda: HANG in fake.models_seen(), 120, "the model's first request")
        done = await anyio.to_thread.run_sync(service.cancel_test, settings, started.test_id)
    assert done.state == "cancelled"
    assert done.models_tested[0].state == "cancelled"
    await _until(lambda: not _processes_under(home / "tests" / started.test_id), 15, "the test's processes to end")


async def test_a_dead_worker_reads_as_failed_and_its_models_are_ended(home: Path) -> None:
    with FakeOpenRouter(behaviours={HANG: "hang"}, hang_s=600) as fake:
        settings = _settings(home, fake)
        env_ref, env_config = _environment(settings)
        started = service.start_test(
            settings, env_ref, env_config, num_steps=1, group_size=2, models=[HANG], model_timeout_s=300
        )
        await _until(lambda: HANG in fake.models_seen(), 120, "the model's first request")
        await _until(
            lambda: service.read_test(settings, started.test_id).models_tested[0].pid is not None, 10, "the pid"
        )
        record = WorkerRecord.model_validate_json((home / "tests" / started.test_id / WORKER_FILE).read_text())
        os.kill(record.pid, signal.SIGKILL)  # no chance to clean up
        await _until(
            lambda: not psutil.pid_exists(record.pid) or psutil.Process(record.pid).status() == psutil.STATUS_ZOMBIE,
            10,
            "the worker to die",
        )
        folder = home / "tests" / started.test_id
        summary = (folder / "summary.json").read_bytes()
        # A read (the MCP tools') says failed at once and writes or signals nothing ...
        seen = service.read_test(settings, started.test_id, repair=False)
        assert seen.state == "failed" and (folder / "summary.json").read_bytes() == summary
        assert _processes_under(folder)
        # ... the server's watcher records it and ends the leftovers.
        assert service.repair_dead_tests(settings) == [started.test_id]
        result = service.read_test(settings, started.test_id)
    assert result.state == "failed" and "worker exited" in result.message
    assert result.models_tested[0].state == "failed"
    await _until(
        lambda: not _processes_under(home / "tests" / started.test_id), 15, "the orphaned model process to end"
    )
