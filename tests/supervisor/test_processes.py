from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import psutil

from mcp_rl.supervisor import processes
from tests.supervisor.helpers import wait_for

# A parent that starts a grandchild in its own group, then prints both pids.
TREE = """
import os, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time\\nwhile True: time.sleep(1)"])
print(os.getpid(), child.pid, flush=True)
while True: time.sleep(1)
"""

STUBBORN = """
import signal, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("ignoring SIGTERM", flush=True)
while True: time.sleep(1)
"""


def _pids_from_log(log: Path, count: int) -> list[int]:
    def read() -> list[int] | None:
        words = log.read_text().split() if log.exists() else []
        return [int(w) for w in words[:count]] if len(words) >= count and all(w.isdigit() for w in words[:count]) else None

    return wait_for(read, 20, f"{count} pids in {log}")


def test_spawn_is_detached_and_stop_ends_the_whole_group(tmp_path: Path) -> None:
    log = tmp_path / "tree.log"
    popen = processes.spawn([sys.executable, "-c", TREE], log, dict(os.environ))
    parent, child = _pids_from_log(log, 2)
    ident = processes.identify(parent)
    assert ident is not None
    assert ident.pgid == parent != os.getpgid(0)  # own group, not ours
    assert os.getsid(parent) == parent  # own session: the stdio client's group kill cannot reach it
    assert os.getpgid(child) == parent
    processes.stop_group(ident.pid, ident.pgid, ident.create_time, grace_s=5)
    popen.wait(timeout=5)
    assert not psutil.pid_exists(child) or psutil.Process(child).status() == psutil.STATUS_ZOMBIE


def test_stop_kills_a_process_that_ignores_sigterm_after_the_grace(tmp_path: Path) -> None:
    log = tmp_path / "stubborn.log"
    popen = processes.spawn([sys.executable, "-c", STUBBORN], log, dict(os.environ))
    wait_for(lambda: log.exists() and "ignoring" in log.read_text(), 20, "the handler to be installed")
    ident = processes.identify(popen.pid)
    started = time.monotonic()
    code = processes.stop_group(ident.pid, ident.pgid, ident.create_time, grace_s=0.5)
    assert time.monotonic() - started < 5
    assert code == -9
    assert popen.wait(timeout=5) is not None


def test_identity_guards_against_pid_reuse(tmp_path: Path) -> None:
    popen = processes.spawn([sys.executable, "-c", "import time; time.sleep(60)"], tmp_path / "x.log", dict(os.environ))
    ident = processes.identify(popen.pid)
    assert processes.is_alive(ident.pid, ident.create_time)
    assert not processes.is_alive(ident.pid, ident.create_time - 100)  # same pid, other process
    # A recorded identity that no longer matches is never signalled.
    assert processes.stop_group(ident.pid, ident.pgid, ident.create_time - 100, grace_s=0.5) is None
    assert popen.poll() is None
    processes.stop_group(ident.pid, ident.pgid, ident.create_time, grace_s=2)
    popen.wait(timeout=5)
    assert not processes.is_alive(ident.pid, ident.create_time)


def test_exit_descriptions() -> None:
    assert processes.exit_description(-9) == "killed by signal SIGKILL"
    assert processes.exit_description(3) == "exit code 3"
