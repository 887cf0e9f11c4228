"""Starting and ending process groups, and telling whether a recorded process still lives.

Every process we start gets its own session (hence its own process group), stdin from
/dev/null and its output in a log file: the stdio MCP client kills its server's whole group when
the session ends, and runs must survive that. A process is identified by pid *and* start time,
so a recycled pid is never mistaken for one of ours.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil

# psutil reports start times rounded to the clock tick; allow for that when comparing.
_CREATE_TIME_TOLERANCE_S = 0.05


@dataclass(frozen=True)
class ProcessIdentity:
    pid: int
    pgid: int
    create_time: float


def spawn(argv: Sequence[str], log_path: Path, env: Mapping[str, str], cwd: Path | None = None) -> subprocess.Popen[bytes]:
    """Start `argv` in a new session with its output appended to `log_path`."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        return subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=dict(env),
            cwd=cwd,
            start_new_session=True,
            close_fds=True,
        )


def identify(pid: int) -> ProcessIdentity | None:
    """The identity of a live process, or None if it is gone."""
    try:
        proc = psutil.Process(pid)
        return ProcessIdentity(pid=pid, pgid=os.getpgid(pid), create_time=proc.create_time())
    except (psutil.NoSuchProcess, ProcessLookupError):
        return None


def is_alive(pid: int | None, create_time: float | None) -> bool:
    """True if `pid` runs and is the process started at `create_time` (not a recycled pid)."""
    if not pid:
        return False
    try:
        proc = psutil.Process(pid)
        if create_time is not None and abs(proc.create_time() - create_time) > _CREATE_TIME_TOLERANCE_S:
            return False
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def exit_description(code: int | None) -> str:
    if code is None:
        return "exit code unknown"
    if code < 0:
        try:
            return f"killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def _group_members(pgid: int, leader_create_time: float | None) -> list[psutil.Process]:
    """Processes still in group `pgid`, if that group is still the one we started.

    Linux does not reuse a pid while a group of that id has members, so members found are ours,
    unless the group's leader pid is now held by a different (newer) process that leads its own
    group: then our group is gone and this one belongs to someone else.
    """
    leader_ok = True
    try:
        leader = psutil.Process(pgid)
        if leader_create_time is not None and abs(leader.create_time() - leader_create_time) > _CREATE_TIME_TOLERANCE_S:
            leader_ok = False
    except psutil.NoSuchProcess:
        pass
    if not leader_ok:
        return []
    members = []
    for proc in psutil.process_iter():
        try:
            if os.getpgid(proc.pid) == pgid:
                members.append(proc)
        except (ProcessLookupError, psutil.NoSuchProcess, PermissionError):
            continue
    return members


def _descendants(pid: int, create_time: float | None) -> list[psutil.Process]:
    try:
        proc = psutil.Process(pid)
        if create_time is not None and abs(proc.create_time() - create_time) > _CREATE_TIME_TOLERANCE_S:
            return []
        return [proc, *proc.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def _signal_all(procs: Sequence[psutil.Process], pgid: int, sig: signal.Signals) -> None:
    """Signal the group (also reaching members started after we looked) and each one found."""
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass
    for proc in procs:  # members that left the group (setsid) are signalled one by one
        try:
            proc.send_signal(sig)
        except psutil.NoSuchProcess:
            pass


def stop_group(pid: int, pgid: int | None, create_time: float | None, grace_s: float) -> int | None:
    """End a process, its group and its descendants: SIGTERM, wait `grace_s`, then SIGKILL.

    Returns the exit code of `pid` when it is our child and we reaped it, else None.
    """
    pgid = pgid or pid
    # Collect everything up front: once the leader dies its children are re-parented and the
    # tree can no longer be walked from it.
    procs = {p.pid: p for p in [*_descendants(pid, create_time), *_group_members(pgid, create_time)]}
    if not procs:
        return None
    leader = procs.get(pid)
    _signal_all(list(procs.values()), pgid, signal.SIGTERM)
    _gone, alive = psutil.wait_procs(list(procs.values()), timeout=grace_s)
    if alive:
        _signal_all(alive, pgid, signal.SIGKILL)
        psutil.wait_procs(alive, timeout=10)
    if leader is not None:
        code = getattr(leader, "returncode", None)
        if code is not None:
            return int(code)
    return None
