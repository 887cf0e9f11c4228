"""A long-lived service a test fixture starts and owns (a Ray head, SkyRL's Tinker API server): in
a session of its own, so ending it ends everything it started and nothing else; its output in a
log file; ready when its health URL answers 200 (a deadline, and at once a failure when it exits)."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import httpx

from tests.kit.wait import wait_for

STOP_GRACE_S = 60.0


class ServiceProcess:
    def __init__(self, name: str, argv: list[str], env: dict[str, str], log: Path, cwd: Path | None = None) -> None:
        self.name = name
        self.argv = argv
        self.env = env
        self.log = log
        self.cwd = cwd
        self._popen: subprocess.Popen[bytes] | None = None

    @property
    def popen(self) -> subprocess.Popen[bytes]:
        assert self._popen is not None, f"{self.name} was not started"
        return self._popen

    def alive(self) -> bool:
        return self._popen is not None and self._popen.poll() is None

    def tail(self, n: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:]) if self.log.exists() else ""

    def start(self, health_url: str, deadline_s: float) -> None:
        """Start it and wait until `health_url` answers 200; stopped again when it does not in time."""
        with open(self.log, "ab") as log:
            self._popen = subprocess.Popen(
                self.argv, stdout=log, stderr=subprocess.STDOUT, env=self.env, cwd=self.cwd, start_new_session=True
            )
        try:
            wait_for(lambda: _answers(health_url), deadline_s, f"{self.name} at {health_url}", watch=[self])
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """TERM to its session's group (the service ends what it started), KILL after the grace."""
        if self._popen is None:
            return
        if self._popen.poll() is None:
            os.killpg(self._popen.pid, signal.SIGTERM)
            try:
                self._popen.wait(timeout=STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                os.killpg(self._popen.pid, signal.SIGKILL)
                self._popen.wait(timeout=30)
        self._popen = None


def _answers(url: str) -> bool:
    try:
        with httpx.Client(timeout=5, trust_env=False) as client:
            return client.get(url).status_code == 200
    except httpx.HTTPError:
        return False
