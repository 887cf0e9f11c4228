"""Helpers for supervisor tests: a stand-in for a process that is not ours."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.kit.wait import wait_for

# A process that records every catchable signal it gets, standing in for one that is not ours.
_STRANGER = r"""
import signal, sys, time
log = open(sys.argv[1], "a", buffering=1)
for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGCONT, signal.SIGUSR1):
    signal.signal(sig, lambda n, f: log.write(signal.Signals(n).name + "\n"))
log.write("ready\n")
while True: time.sleep(0.2)
"""

_LAUNCH_DETACHED = r"""
import subprocess, sys
child = subprocess.Popen(sys.argv[1:], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
print(child.pid, flush=True)
"""


class Stranger:
    """A process the test starts that is NOT its child and carries no run marker: a stand-in for
    an unrelated process whose pid a damaged registry row may name. Ended by `close()` only."""

    def __init__(self, tmp_path: Path, name: str = "stranger", marker: str | None = None) -> None:
        import psutil

        self.signals_file = tmp_path / f"{name}.signals"
        out = subprocess.run(
            [sys.executable, "-c", _LAUNCH_DETACHED, sys.executable, "-c", _STRANGER, str(self.signals_file)],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
            env=self._env(marker),
        )
        self.pid = int(out.stdout.split()[0])
        self.process = psutil.Process(self.pid)
        self.create_time = self.process.create_time()
        wait_for(lambda: "ready" in self.signals(), 20, f"{name} to install its handlers")

    @staticmethod
    def _env(marker: str | None) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k != "MCP_RL_MARKER"}
        if marker:  # a process of ours, just not the test's child (e.g. a run's after its supervisor died)
            env["MCP_RL_MARKER"] = marker
        return env

    def signals(self) -> list[str]:
        return self.signals_file.read_text().split() if self.signals_file.exists() else []

    def untouched(self) -> bool:
        """Alive, not frozen, and never got a signal."""
        import psutil

        return (
            self.process.is_running()
            and self.process.status() not in (psutil.STATUS_ZOMBIE, psutil.STATUS_STOPPED)
            and self.signals() == ["ready"]
        )

    def close(self) -> None:
        import psutil

        def ended() -> bool:
            try:
                return not self.process.is_running() or self.process.status() == psutil.STATUS_ZOMBIE
            except psutil.NoSuchProcess:
                return True

        try:
            self.process.kill()  # psutil refuses if the pid was reused meanwhile
        except psutil.NoSuchProcess:
            return
        # Not our child: its new parent reaps it; a zombie has ended.
        wait_for(ended, 10, "the stranger to end")
