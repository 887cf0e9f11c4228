"""Starts that are refused as answers unless the caller says so (issue 34).

- A second local run while one trains on this machine: on a few cores both go at a fraction of
  their speed (a 2-core machine: half each). Tinker runs train remotely and are never refused for
  running beside others.
- A start of an environment and config whose last smoke test found it not working.
- A start of a task file whose last validation, of the file as it is now, found problems.
Each refusal names what it found and the exact call that starts anyway.
"""

from __future__ import annotations

import os
import time
from typing import Any

from mcp_rl import config
from mcp_rl.environments.validate import validation_for
from mcp_rl.inference_test.service import session_environment
from mcp_rl.inference_test.verdicts import last_failed_test
from mcp_rl.runconfig import EnvironmentRef
from mcp_rl.settings import Settings
from mcp_rl.supervisor.reconcile import observe
from mcp_rl.supervisor.registry import Registry
from mcp_rl.supervisor.states import ACTIVE_STATES


def local_run_refusal(registry: Registry, backend: str, allow_concurrent: bool) -> str | None:
    """Why a local start would slow a local run already training here (None: it would not)."""
    if backend != "local" or allow_concurrent:
        return None
    running = [
        run for run in (observe(r) for r in registry.list_runs(ACTIVE_STATES)) if run.active and run.backend == "local"
    ]
    if not running:
        return None
    run = running[0]
    minutes = (time.time() - run.created_at) / 60
    return (
        f"Run {run.run_id} ({run.environment}, {run.state}, started {minutes:.0f} min ago) is training on the local "
        f"backend on this machine: a second local run would share its {os.cpu_count() or 1} cores and slow both. "
        f"Nothing was started. Wait for it (rl_wait_for_run({run.run_id!r})), stop it (rl_stop_training"
        f"({run.run_id!r})), or start beside it anyway with rl_start_training(allow_concurrent=true)."
    )


def failed_test_refusal(
    settings: Settings, environment: EnvironmentRef, env_config: dict[str, Any], force: bool
) -> str | None:
    """Why a start of this environment and config would repeat a failed smoke test (None: it would not)."""
    if force:
        return None
    failed = last_failed_test(settings, environment, env_config)
    if failed is None:
        return None
    return (
        f"The last smoke test of {environment.name} with this config ({failed.test_id}) found the environment not "
        f"working: {failed.why}. Nothing was started. Fix the environment or config and test again with "
        f"rl_test_inference, or start anyway with rl_start_training(force=true)."
    )


def failed_validation_refusal(settings: Settings, environment: EnvironmentRef, force: bool) -> str | None:
    """Why a start of this task file would train on what its last validation refused (None: it
    would not: validated fine, never validated, or edited since)."""
    if force:
        return None
    report = validation_for(settings, environment.file_path)
    if report is None or report.ok:
        return None
    first = report.problems[0].message if report.problems else "see its report"
    return (
        f"The last validation of {environment.name} as it is now found {len(report.problems)} problem(s), e.g. "
        f"{first}. Nothing was started. Fix them and check again with rl_validate_environment({environment.name!r}), "
        "or start anyway with rl_start_training(force=true)."
    )


def refusal(
    settings: Settings, registry: Registry, environments: Any, allow_concurrent: bool, force: bool
) -> str | None:
    """Why the session's start is refused (None: it may start). `environments` is the server's
    EnvironmentService."""
    session, _ = environments.selected()
    options, _ = config.resolve_run_options(settings, session.run_options)
    backend = config.effective_backend(settings, options.backend)
    found = local_run_refusal(registry, backend, allow_concurrent)
    if found is None and not force:
        environment, env_config = session_environment(environments)
        found = failed_validation_refusal(settings, environment, force) or failed_test_refusal(
            settings, environment, env_config, force
        )
    return found
