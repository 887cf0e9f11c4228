"""A smoke test's failed model names the exception and where, not an exit code (issue 34)."""

from __future__ import annotations

from pathlib import Path

from mcp_rl.inference_test.models import MODEL_LOG
from mcp_rl.inference_test.runner import exit_reason
from mcp_rl.rundir import ENV_HEALTH_FILE, EnvError, EnvHealth


def test_the_recorded_exception_is_named_with_its_place(tmp_path: Path) -> None:
    error = EnvError(type="ZeroDivisionError", message="division by zero", where="my_env.py:12 in score")
    health = EnvHealth(groups_failed=1, streak=1, last_error=error)
    (tmp_path / ENV_HEALTH_FILE).write_text(health.model_dump_json())
    assert exit_reason(tmp_path, 1) == (
        "the environment raised ZeroDivisionError: division by zero (raised at my_env.py:12 in score) "
        "on 1 of 1 groups; it exited with code 1"
    )


def test_without_a_record_the_last_traceback_of_the_log_is_named(tmp_path: Path) -> None:
    (tmp_path / MODEL_LOG).write_text(
        'starting\nTraceback (most recent call last):\n  File "x.py", line 3, in <module>\n    import y\n'
        "ModuleNotFoundError: No module named 'y'\nbye\n"
    )
    assert exit_reason(tmp_path, 1) == (
        "the environment exited with code 1 after: ModuleNotFoundError: No module named 'y'"
    )
    assert exit_reason(tmp_path / "nothing", 2) == "the environment exited with code 2"
