"""The last smoke test of an environment and config, as a start sees it (issue 34).

A run of an environment whose smoke test just failed, with the same config, fails the same way
an hour later: rl_start_training asks this module first and answers with the test instead.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from mcp_rl.errors import NotFound
from mcp_rl.inference_test.models import SPEC_FILE, TestSpec
from mcp_rl.inference_test.service import read_test
from mcp_rl.runconfig import EnvironmentRef
from mcp_rl.settings import Settings

# Only the newest tests are looked at: a start must answer at once.
LOOK_BACK = 50


class FailedTest(NamedTuple):
    test_id: str
    why: str  # the failing model's error, or the test's message


def last_failed_test(settings: Settings, environment: EnvironmentRef, env_config: dict[str, Any]) -> FailedTest | None:
    """The newest finished smoke test of exactly this environment and config, if it found the
    environment not working (None: no such test, the newest one passed, or it is still running)."""
    if not settings.tests_dir.is_dir():
        return None
    ids = sorted((p.name for p in settings.tests_dir.iterdir() if (p / SPEC_FILE).is_file()), reverse=True)
    for test_id in ids[:LOOK_BACK]:
        try:
            spec = TestSpec.load(settings.tests_dir / test_id / SPEC_FILE)
        except (OSError, ValueError):
            continue
        if spec.environment != environment or spec.env_config != env_config:
            continue
        try:
            result = read_test(settings, test_id, repair=False)
        except (NotFound, OSError, ValueError):
            return None
        if result.state == "running" or result.summary.environment_working is not False:
            return None
        errors = [f"{m.model}: {m.error}" for m in result.models_tested if m.error]
        return FailedTest(test_id, "; ".join(errors[:2]) or result.message)
    return None
