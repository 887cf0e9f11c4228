"""An environment's exceptions are counted and named in env_health.json (issue 34)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mcp_rl.environments import failure_report
from mcp_rl.rundir import ENV_HEALTH_FILE, read_env_health

pytestmark = pytest.mark.anyio


def score(text: str) -> float:
    return len(text) / 0


class Env:
    def __init__(self, bad: set[int]) -> None:
        self.bad = bad

    async def collect_trajectories(self, item: int):
        if item in self.bad:
            score("x")
        return {"scores": [1.0, 0.0]}, []


async def test_each_failure_is_counted_with_its_type_message_place_and_traceback(tmp_path: Path) -> None:
    class Broken(Env):
        pass

    recorder = failure_report.install_beside_config(Broken, str(tmp_path / "run.yaml"), Path(__file__).parent)
    assert recorder is not None
    env = Broken(bad={1, 2, 3})
    assert await env.collect_trajectories(0) == ({"scores": [1.0, 0.0]}, [])
    for item in (1, 2, 3):
        with pytest.raises(ZeroDivisionError):  # raised on: Atropos still sees it
            await env.collect_trajectories(item)
    health = read_env_health(tmp_path / ENV_HEALTH_FILE)
    assert health is not None and health.last_error is not None
    assert (health.groups_scored, health.groups_failed, health.streak) == (1, 3, 3)
    assert health.last_error.type == "ZeroDivisionError"
    assert health.last_error.message == "division by zero"
    line = score.__code__.co_firstlineno + 1
    assert health.last_error.where == f"test_failure_report.py:{line} in score"
    assert "Traceback (most recent call last)" in health.last_error.traceback
    assert "return len(text) / 0" in health.last_error.traceback
    await env.collect_trajectories(4)  # a scored group ends the streak; the counts stay
    health = read_env_health(tmp_path / ENV_HEALTH_FILE)
    assert health is not None and (health.groups_scored, health.groups_failed, health.streak) == (2, 3, 0)
    assert health.summary() == (
        "3 of 5 groups failed in the environment (last: ZeroDivisionError: division by zero "
        f"(raised at test_failure_report.py:{line} in score)); 2 scored"
    )


async def test_a_different_exception_starts_a_new_streak(tmp_path: Path) -> None:
    class Mixed(Env):
        async def collect_trajectories(self, item: int):
            if item == 2:
                raise KeyError("answer")
            return await super().collect_trajectories(item)

    failure_report.install(Mixed, failure_report.HealthRecorder(tmp_path / ENV_HEALTH_FILE))
    env = Mixed(bad={0, 1})
    for item in (0, 1, 2):
        with pytest.raises((ZeroDivisionError, KeyError)):
            await env.collect_trajectories(item)
    health = read_env_health(tmp_path / ENV_HEALTH_FILE)
    assert health is not None and health.last_error is not None
    assert (health.groups_failed, health.streak, health.last_error.type) == (3, 1, "KeyError")


def test_no_config_no_report(tmp_path: Path) -> None:
    assert failure_report.install_beside_config(Env, None, tmp_path) is None
