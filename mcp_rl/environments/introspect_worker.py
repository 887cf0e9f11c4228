"""The server's side of the long-lived introspection worker (`introspect_child --worker`).

A fresh child per select paid ~3 s for importing atroposlib (torch, transformers) before the
environment's own imports even began. The worker imports it once and forks a child per request
(see `introspect_child`), so a cold select costs about the environment's own import time.

The worker is our child: started without blocking (`start`, e.g. when the agent lists
environments, so it is warm by the time it selects), spoken to through pipes, one request at a
time with a deadline each, and stopped by `close` (also when the server exits, since its stdin
closes). It runs with no real secrets (see `introspection_env`).

One request at a time per worker, so a select never waits behind another environment's slow
import (issue 34: a 75 s import kept `arithmetic` from selecting): a request still running after
`SPARE_AFTER_S` warms a spare worker, and a request that finds this worker busy goes to the
spare instead. Quick requests never start one.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mcp_rl.environments.discovery import declared_env_vars
from mcp_rl.settings import Settings

# Clients some environments create when imported (OpenAI() raises without a key): a placeholder
# lets them import; config introspection never calls a service.
DUMMY_KEYS = {
    "OPENAI_API_KEY": "mcp-rl-introspection-placeholder",
    "ANTHROPIC_API_KEY": "mcp-rl-introspection-placeholder",
}
# How long close() lets the worker finish on its own before it is terminated.
_CLOSE_GRACE_S = 2.0
# A request running longer than this (an environment with heavy imports) warms a spare worker
# for the requests that come meanwhile; most requests take well under a second.
SPARE_AFTER_S = 1.0


def introspection_env(settings: Settings, named: Sequence[str] = ()) -> dict[str, str]:
    """The environment of introspection children: the user-code environment (no key of ours),
    with placeholder keys for import-time API clients and the variables the environment names."""
    env = settings.user_code_env()
    env.update(DUMMY_KEYS)
    env.update(named_values(settings, named))
    return env


def named_values(settings: Settings, named: Sequence[str]) -> dict[str, str]:
    """The variables an environment names (its `env_vars`) with their values: a forked
    introspection child sets them before it imports the environment (the warm worker has none)."""
    base = settings.user_code_env(named)
    return {name: base[name] for name in named if name in base}


class WorkerError(Exception):
    """The worker died or broke the protocol (the request may be retried with a new worker)."""


class IntrospectionWorker:
    def __init__(self, settings: Settings, spare_allowed: bool = True) -> None:
        self.settings = settings
        self._proc: subprocess.Popen[bytes] | None = None
        self._ready = False
        self._buffer = b""
        self._seq = 0
        self._lock = threading.Lock()
        self._spare_allowed = spare_allowed
        self.spare: IntrospectionWorker | None = None
        self._spare_lock = threading.Lock()

    @property
    def ready(self) -> bool:
        """atroposlib is imported: a request now costs only the environment's own imports."""
        return self._ready and self._proc is not None and self._proc.poll() is None

    def _warm_spare(self) -> None:
        """Start the spare and read its ready line, in the background (a select may need it soon)."""
        with self._spare_lock:
            if self.spare is None:
                self.spare = IntrospectionWorker(self.settings, spare_allowed=False)
            spare = self.spare
        threading.Thread(target=spare.warm, name="introspection-spare", daemon=True).start()

    def warm(self, timeout_s: float = 120.0) -> None:
        """Start the worker and wait (up to `timeout_s`) until it has imported atroposlib."""
        with self._lock:
            proc = self._ensure_started()
            if self._ready:
                return
            try:
                self._read_line(proc, time.monotonic() + timeout_s)
                self._ready = True
            except (TimeoutError, OSError, WorkerError):
                self._stop(proc)

    @property
    def folder(self) -> Path:
        return self.settings.cache_dir / "introspect"

    @property
    def _request_log(self) -> Path:
        # Per server process: two servers sharing a state dir must not mix their log tails.
        # The spare's own: two requests at once must not mix theirs either.
        return self.folder / f"request-{os.getpid()}{'' if self._spare_allowed else '-spare'}.log"

    def start(self) -> None:
        """Start the worker if it is not running (returns at once; it warms up by itself)."""
        if not self._lock.acquire(blocking=False):
            return  # busy with a request: it is running (never wait behind that request)
        try:
            self._ensure_started()
        finally:
            self._lock.release()

    def _ensure_started(self) -> subprocess.Popen[bytes]:
        if self._proc is not None and self._proc.poll() is None:
            return self._proc
        self.folder.mkdir(parents=True, exist_ok=True)
        with open(self.folder / "worker.log", "ab") as log:
            self._proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "mcp_rl.environments.introspect_child",
                    "--worker",
                    f"{self.settings.introspect_worker_idle_s:g}",
                ],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                env=introspection_env(self.settings),
                start_new_session=True,
            )
        self._ready = False
        self._buffer = b""
        return self._proc

    def request(
        self,
        file_path: Path,
        class_name: str,
        project_root: Path,
        timeout_s: float,
        check: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """One environment described by a forked child, within `timeout_s` in all (warm-up
        included). Returns the child's answer (`ok`, `spec` | `failure` | `timeout`). With
        `check` ({"values", "edited"}), the child validates a whole config instead (`ok`, `check`)."""
        if not self._lock.acquire(blocking=not self._spare_allowed):
            # Busy with another environment (perhaps a slow import): the spare answers instead.
            if self.spare is None:
                self._warm_spare()
            assert self.spare is not None
            return self.spare.request(file_path, class_name, project_root, timeout_s, check)
        timer = threading.Timer(SPARE_AFTER_S, self._warm_spare) if self._spare_allowed else None
        try:
            if timer is not None:
                timer.daemon = True
                timer.start()
            return self._request_locked(file_path, class_name, project_root, timeout_s, check)
        finally:
            if timer is not None:
                timer.cancel()
            self._lock.release()

    def _request_locked(
        self,
        file_path: Path,
        class_name: str,
        project_root: Path,
        timeout_s: float,
        check: dict[str, Any] | None,
    ) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        proc = self._ensure_started()
        try:
            if not self._ready:
                self._read_line(proc, deadline)  # {"ready": true} once atroposlib is imported
                self._ready = True
            self._seq += 1
            request = {
                "id": self._seq,
                "file": str(file_path),
                "class_name": class_name,
                "project_root": str(project_root),
                "timeout_s": max(0.1, deadline - time.monotonic()),
                "log": str(self._request_log),
                # the variables the environment names: its forked child sets them before importing it
                "env": named_values(self.settings, declared_env_vars(file_path, class_name)),
            }
            if check is not None:
                request["check"] = check
            assert proc.stdin is not None
            proc.stdin.write(json.dumps(request).encode() + b"\n")
            proc.stdin.flush()
            # The worker enforces the deadline on its child; a little slack for its answer.
            answer = json.loads(self._read_line(proc, deadline + 5.0))
        except TimeoutError:
            self._stop(proc)  # the worker itself is stuck (e.g. still importing): start over next time
            return {"ok": False, "timeout": True, "log_tail": self._worker_log_tail()}
        except (OSError, ValueError, WorkerError) as exc:
            self._stop(proc)
            raise WorkerError(f"{exc}; worker log: {self._worker_log_tail()}") from exc
        if answer.get("id") != request["id"]:
            raise WorkerError(f"answer to request {answer.get('id')}, expected {request['id']}")
        return answer

    def _read_line(self, proc: subprocess.Popen[bytes], deadline: float) -> bytes:
        assert proc.stdout is not None
        fd = proc.stdout.fileno()
        while b"\n" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError
            ready, _, _ = select.select([fd], [], [], remaining)
            if not ready:
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                raise WorkerError(f"the introspection worker exited (code {proc.wait()})")
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return line

    def _worker_log_tail(self) -> list[str]:
        try:
            text = (self.folder / "worker.log").read_text(encoding="utf-8", errors="replace")
        except OSError:
            return []
        return text.strip().splitlines()[-10:]

    def _stop(self, proc: subprocess.Popen[bytes]) -> None:
        """End the worker: stdin closed (it exits between requests), then terminated."""
        try:
            if proc.stdin is not None:
                proc.stdin.close()
        except OSError:
            pass
        try:
            # A worker still importing reads no stdin yet: no point waiting for it.
            proc.wait(timeout=_CLOSE_GRACE_S if self._ready else 0)
        except subprocess.TimeoutExpired:
            proc.kill()  # our own unreaped child: the pid is proven ours
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
        if self._proc is proc:
            self._proc = None
            self._ready = False

    def close(self) -> None:
        """Stop the worker (without waiting for a request in flight: that request fails)."""
        if self.spare is not None:
            self.spare.close()
        proc = self._proc
        if proc is not None:
            self._stop(proc)
        self._request_log.unlink(missing_ok=True)

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None and self._proc.poll() is None else None
