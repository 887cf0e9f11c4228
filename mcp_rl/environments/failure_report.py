"""An environment's exceptions, recorded where the supervisor and smoke tests can read them.

Atropos's `handle_env` catches whatever `collect_trajectories` raises, logs one line without
the exception's type or place ("Error in collect_trajectories: division by zero") and moves on
to the next item, forever: an environment whose `score()` always raises keeps a run at step 0
with no error anywhere. The runner (and a smoke test's child) hook the environment class's
`collect_trajectories` with `install` (mcp_rl.environments.atropos_hooks): every group it returns or raises on is counted in
`env_health.json` (format: mcp_rl.rundir.EnvHealth) beside the process's config, with the last
exception's type, message, the place in the environment's own code it came from and its
traceback. The exception is then raised on, so Atropos behaves as before; the supervisor
decides from the file whether the run can still make progress (mcp_rl.supervisor.env_watch).
"""

from __future__ import annotations

import logging
import threading
import time
import traceback
from pathlib import Path
from typing import Any

from mcp_rl import redact
from mcp_rl.atomic import write_text_atomic
from mcp_rl.environments import atropos_hooks
from mcp_rl.rundir import ENV_HEALTH_FILE, EnvError, EnvHealth

log = logging.getLogger(__name__)

TRACEBACK_CHARS = 4000


def where_raised(exc: BaseException, own_code: Path | None) -> str | None:
    """'file.py:42 in func' of the innermost frame under `own_code` (the environment's project),
    else of the innermost frame outside the standard library and site-packages, else the last."""
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return None

    def mine(filename: str) -> bool:
        if own_code is not None:
            try:
                Path(filename).resolve().relative_to(own_code)
                return "site-packages" not in filename
            except ValueError:
                return False
        return "site-packages" not in filename and "/lib/python" not in filename

    chosen = next((f for f in reversed(frames) if mine(f.filename)), frames[-1])
    return f"{Path(chosen.filename).name}:{chosen.lineno} in {chosen.name}"


def describe(exc: BaseException, own_code: Path | None) -> EnvError:
    # Scrubbed before it is clipped (a key cut in half would no longer be recognised): the
    # supervisor quotes this as a run's cause.
    text = redact.scrub("".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))
    return EnvError(
        type=type(exc).__name__,
        message=redact.scrub(str(exc))[:500],
        where=where_raised(exc, own_code),
        traceback=text[-TRACEBACK_CHARS:],
        time=time.time(),
    )


class HealthRecorder:
    """Counts groups and keeps the last exception; rewrites the file after each group."""

    def __init__(self, path: Path, own_code: Path | None = None) -> None:
        self.path = path
        self.own_code = own_code.resolve() if own_code is not None else None
        self.health = EnvHealth()
        self._lock = threading.Lock()

    def scored(self) -> None:
        with self._lock:
            self.health.groups_scored += 1
            self.health.streak = 0
            self.health.last_scored_at = time.time()
            self._write()

    def failed(self, exc: BaseException) -> None:
        error = describe(exc, self.own_code)
        with self._lock:
            h = self.health
            last = h.last_error
            same = last is not None and (last.type, last.where) == (error.type, error.where)
            h.streak = h.streak + 1 if same else 1
            h.groups_failed += 1
            h.first_failure_at = h.first_failure_at or error.time
            h.last_error = error
            self._write()

    def _write(self) -> None:
        try:
            write_text_atomic(self.path, self.health.model_dump_json())
        except OSError as exc:  # the report must never take the environment down
            log.warning("could not write %s: %s", self.path, exc)


def install(cls: Any, recorder: HealthRecorder) -> None:
    """Count every group `cls.collect_trajectories` returns or raises on (idempotent)."""

    def returned(result: Any) -> None:
        group = result[0] if isinstance(result, tuple) and result else result
        if group is not None:
            recorder.scored()

    atropos_hooks.around_collect_trajectories(cls, returned, recorder.failed)


def install_beside_config(cls: Any, config_path: str | None, own_code: Path) -> HealthRecorder | None:
    """Install with the file beside the process's config (None: no config given, nothing done)."""
    if config_path is None:
        return None
    recorder = HealthRecorder(Path(config_path).resolve().parent / ENV_HEALTH_FILE, own_code)
    install(cls, recorder)
    return recorder
