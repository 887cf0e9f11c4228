from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import psutil

from mcp_rl import processes
from mcp_rl.processes import Liveness
from tests.kit.stranger import Stranger
from tests.kit.wait import wait_for

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
        return (
            [int(w) for w in words[:count]] if len(words) >= count and all(w.isdigit() for w in words[:count]) else None
        )

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


SLEEP = [sys.executable, "-c", "import time\nwhile True: time.sleep(1)"]


def test_only_a_start_time_and_marker_prove_a_process_ours(tmp_path: Path) -> None:
    stranger = Stranger(tmp_path)  # not our child, no marker
    try:
        assert processes.prove(stranger.pid, None, "run:x").liveness == Liveness.UNPROVEN
        assert processes.prove(stranger.pid, stranger.create_time, "run:x").liveness == Liveness.UNPROVEN
        assert processes.prove(stranger.pid, stranger.create_time, None).liveness == Liveness.UNPROVEN
        assert processes.prove(stranger.pid, stranger.create_time - 100, "run:x").liveness == Liveness.GONE
        assert processes.prove(1, None, "run:x").liveness == Liveness.UNPROVEN  # never init
        for create_time in (None, stranger.create_time):
            ended = processes.stop(stranger.pid, stranger.pid, create_time, "run:x", grace_s=0.5)
            assert not ended.proven and ended.signalled == []
            assert "marker" in ended.note or "start time" in ended.note
        assert not processes.is_alive(stranger.pid, None)  # read-only, but nothing proven either
        assert stranger.untouched(), stranger.signals()
    finally:
        stranger.close()

    popen = processes.spawn(SLEEP, tmp_path / "mine.log", dict(os.environ), marker="run:mine")
    ident = processes.identify(popen.pid)
    assert ident.marker == "run:mine"
    assert processes.prove(ident.pid, ident.create_time, "run:mine").liveness == Liveness.ALIVE
    assert processes.prove(ident.pid, ident.create_time, "run:other").liveness == Liveness.UNPROVEN
    # Without a marker to compare, a process that is not our child must carry one of ours.
    orphan = Stranger(tmp_path, "orphan", marker="run:mine")
    try:
        assert processes.prove(orphan.pid, orphan.create_time, None).liveness == Liveness.ALIVE
        assert processes.prove(orphan.pid, None, None).liveness == Liveness.UNPROVEN
        assert processes.prove(orphan.pid, orphan.create_time, "run:other").liveness == Liveness.UNPROVEN
    finally:
        orphan.close()
    ended = processes.stop(ident.pid, ident.pgid, ident.create_time, "run:mine", grace_s=2)
    assert ended.proven and ended.signalled == [ident.pid] and ended.exit_code == -signal.SIGTERM


def test_a_frozen_process_is_continued_and_stopped_gently(tmp_path: Path) -> None:
    popen = processes.spawn(SLEEP, tmp_path / "frozen.log", dict(os.environ), marker="run:f")
    ident = processes.identify(popen.pid)
    os.kill(ident.pid, signal.SIGSTOP)
    wait_for(lambda: processes.prove(ident.pid, ident.create_time, "run:f").liveness == Liveness.FROZEN, 5, "frozen")
    started = time.monotonic()
    ended = processes.stop(ident.pid, ident.pgid, ident.create_time, "run:f", grace_s=10)
    assert time.monotonic() - started < 8  # SIGTERM acted on at once, not after the 10 s grace
    assert ended.exit_code == -signal.SIGTERM and not ended.left


# A leader whose group holds one member with the marker and one without; the leader exits.
TREE_MIXED = """
import os, subprocess, sys
env = {k: v for k, v in os.environ.items() if k != "MCP_RL_MARKER"}
sleep = [sys.executable, "-c", "import time\\nwhile True: time.sleep(1)"]
marked = subprocess.Popen(sleep)
unmarked = subprocess.Popen(sleep, env=env)
print(marked.pid, unmarked.pid, flush=True)
os._exit(0)
"""


def test_without_a_live_leader_only_marked_members_are_signalled(tmp_path: Path) -> None:
    log = tmp_path / "tree.log"
    popen = processes.spawn([sys.executable, "-c", TREE_MIXED], log, dict(os.environ), marker="run:t")
    leader = processes.identify(popen.pid) or processes.ProcessIdentity(popen.pid, popen.pid, 0.0)
    marked, unmarked = _pids_from_log(log, 2)
    popen.wait(timeout=10)
    marked_proc, unmarked_proc = psutil.Process(marked), psutil.Process(unmarked)
    try:
        # The leader is gone: its group is not killed as a whole; the unmarked member is spared.
        ended = processes.stop(popen.pid, popen.pid, leader.create_time, "run:t", grace_s=2)
        assert ended.proven and unmarked in psutil.pids() and unmarked_proc.is_running()
        assert ended.signalled == [marked]
        wait_for(
            lambda: not marked_proc.is_running() or marked_proc.status() == psutil.STATUS_ZOMBIE, 5, "marked member"
        )
    finally:
        for proc in (marked_proc, unmarked_proc):
            try:
                proc.kill()
            except psutil.NoSuchProcess:
                pass
