"""Guarded starts (issue 34): a second local run beside a running one, and a start after a failed
smoke test of the same environment and config, are refused with the call that accepts them."""

from __future__ import annotations

from pathlib import Path

from mcp_rl.inference_test import report
from mcp_rl.inference_test.models import SPEC_FILE, SUMMARY_FILE, TestSpec
from mcp_rl.model_specs import ModelSpec, model_slug
from mcp_rl.runconfig import EnvironmentRef
from mcp_rl.settings import Settings
from mcp_rl.supervisor import start_guard
from mcp_rl.supervisor.registry import Registry
from mcp_rl.supervisor.states import RunState
from tests.conftest import make_env
from tests.kit.runs import run_record


def test_a_second_local_run_is_refused_naming_the_running_one(tmp_path: Path) -> None:
    registry = Registry(tmp_path / "state.db")
    assert start_guard.local_run_refusal(registry, "local", allow_concurrent=False) is None
    registry.create_run(run_record("done1", tmp_path / "a", state=RunState.COMPLETED))
    assert start_guard.local_run_refusal(registry, "local", allow_concurrent=False) is None
    registry.create_run(run_record("busy1", tmp_path / "b", environment="arithmetic"))
    refused = start_guard.local_run_refusal(registry, "local", allow_concurrent=False)
    assert refused is not None
    assert refused.startswith("Run busy1 (arithmetic, starting, started 0 min ago) is training on the local backend")
    assert "rl_wait_for_run('busy1')" in refused and "rl_start_training(allow_concurrent=true)" in refused
    assert start_guard.local_run_refusal(registry, "local", allow_concurrent=True) is None
    # Tinker trains remotely: runs beside each other are not refused.
    assert start_guard.local_run_refusal(registry, "tinker", allow_concurrent=False) is None


def _write_test(settings: Settings, test_id: str, env: EnvironmentRef, env_config: dict, error: str | None) -> None:
    folder = settings.tests_dir / test_id
    folder.mkdir(parents=True)
    model = ModelSpec(id="local", name="local", scale="s", provider="local", slug=model_slug("local"))
    spec = TestSpec(
        test_id=test_id,
        created_at=0.0,
        environment=env,
        env_config=env_config,
        num_steps=2,
        group_size=4,
        models=[model],
        max_parallel=1,
        model_timeout_s=60,
        openrouter_base_url="http://127.0.0.1:1/v1",
    )
    spec.dump(folder / SPEC_FILE)
    result = report.initial_result(spec, model, folder / model.slug)
    if error:
        result = result.model_copy(update={"state": "failed", "error": error})
    else:
        group = {"tokens": [[1, 2]] * 2, "masks": [[-100, 2]] * 2, "scores": [1.0, 0.0], "messages": []}
        result = report.score_groups(result, [group]).model_copy(update={"state": "succeeded"})
    report.build_result(spec, [result], folder, 0.0, "completed", 1.0).dump(folder / SUMMARY_FILE)


def test_a_start_after_a_failed_smoke_test_of_that_config_says_so(tmp_path: Path) -> None:
    settings = Settings.from_env(make_env(tmp_path))
    env = EnvironmentRef(name="mine", class_name="Mine", file_path=tmp_path / "mine.py", project_root=tmp_path)
    config = {"group_size": 4, "max_count": 3}
    assert start_guard.failed_test_refusal(settings, env, config, force=False) is None
    _write_test(settings, "20261126-100000-aaaaaa", env, config, "the environment raised ZeroDivisionError")
    _write_test(settings, "20261126-100500-bbbbbb", env, {**config, "max_count": 5}, None)  # another config
    refused = start_guard.failed_test_refusal(settings, env, config, force=False)
    assert refused is not None
    assert "last smoke test of mine with this config (20261126-100000-aaaaaa)" in refused
    assert "local: the environment raised ZeroDivisionError" in refused
    assert "rl_start_training(force=true)" in refused
    assert start_guard.failed_test_refusal(settings, env, config, force=True) is None
    assert start_guard.failed_test_refusal(settings, env, {**config, "max_count": 5}, force=False) is None
    # A newer passing test of the same config lifts it.
    _write_test(settings, "20261126-101000-cccccc", env, config, None)
    assert start_guard.failed_test_refusal(settings, env, config, force=False) is None


def test_a_start_of_a_task_whose_last_validation_failed_says_so_until_it_is_edited(tmp_path: Path) -> None:
    from mcp_rl.environments.validate import Problem, ValidationReport, file_digest, record_path

    settings = Settings.from_env(make_env(tmp_path))
    task = tmp_path / "my_task.py"
    task.write_text("ITEMS = []\n")
    env = EnvironmentRef(name="my_task", class_name="MyTask", file_path=task, project_root=tmp_path)
    assert start_guard.failed_validation_refusal(settings, env, force=False) is None  # never validated: a note only
    report = ValidationReport(
        environment="my_task",
        file_path=str(task),
        file_sha256=file_digest(task),
        ok=False,
        problems=[Problem(check="overlap", message="3 held-out items are also training items")],
        seconds=0.5,
        validated_at=1.0,
    )
    record_path(settings, task).parent.mkdir(parents=True)
    record_path(settings, task).write_text(report.model_dump_json())
    refused = start_guard.failed_validation_refusal(settings, env, force=False)
    assert refused is not None and "3 held-out items are also training items" in refused
    assert "rl_validate_environment('my_task')" in refused and "rl_start_training(force=true)" in refused
    assert start_guard.failed_validation_refusal(settings, env, force=True) is None
    task.write_text("ITEMS = [1]\n")  # edited since: the old verdict no longer speaks for it
    assert start_guard.failed_validation_refusal(settings, env, force=False) is None
