"""Running a short-lived child program that prints one JSON document, with a deadline.

Environment modules (and GEM) are heavy and may print or have side effects at import time, so
the MCP server never imports them: it runs `python -m <module>` in its own session (a deadline
ends the whole group), and the child uses `child_main` to keep everything but the final JSON
document off its stdout.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mcp_rl.errors import UserError
from mcp_rl.settings import Settings


def run_json_child(
    settings: Settings,
    module: str,
    args: list[str],
    *,
    doing: str,
    timeout_hint: str,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    timeout_s: float | None = None,
) -> Any:
    """Run the child and return its parsed JSON; any failure is a UserError that says `doing`.

    `env`: the child's environment (default `settings.child_env()`); `timeout_s`: its deadline
    (default MCP_RL_INTROSPECT_TIMEOUT)."""
    timeout = settings.introspect_timeout_s if timeout_s is None else timeout_s
    proc = subprocess.Popen(
        [sys.executable, "-m", module, *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=settings.child_env() if env is None else env,
        cwd=cwd,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise UserError(
            f"{doing} took longer than {timeout:.0f} s. {timeout_hint} (the deadline is MCP_RL_INTROSPECT_TIMEOUT)."
        ) from None
    if proc.returncode != 0:
        tail = err.decode("utf-8", "replace").strip().splitlines()[-15:]
        raise UserError(f"{doing} failed (exit {proc.returncode}). Last lines:\n" + "\n".join(tail))
    try:
        return json.loads(out)
    except ValueError as exc:
        raise UserError(f"{doing} printed something unexpected: {exc}") from exc


def child_main(produce: Callable[[], Any]) -> int:
    """Body of a child program: what the imported code prints goes to stderr; the result to stdout."""
    real_stdout = os.dup(1)
    os.dup2(2, 1)
    try:
        with contextlib.redirect_stdout(sys.stderr):
            result = produce()
    except Exception:
        traceback.print_exc()
        return 1
    with os.fdopen(real_stdout, "w") as out:
        json.dump(result, out)
    return 0
