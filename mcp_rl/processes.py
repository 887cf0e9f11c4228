"""The life cycle of every process mcp-rl starts: runs, smoke tests, the demo and the doctor.

Spawn: each process gets its own session (hence its own process group), stdin from /dev/null,
its output appended to a log file, and a marker in its environment (`MCP_RL_MARKER`) that every
descendant inherits. The stdio MCP client kills its server's whole group when the session ends,
and runs must survive that.

Identity: a process is ours to signal only when that is *proven*: its pid and recorded start
time match (a recycled pid is someone else's) AND it carries the expected marker; or it is our own
child not yet reaped (the kernel gives its pid to no one else). A missing start time or marker
proves nothing: such a process is left alone and the caller says so in words. Group members and
descendants are signalled only when they carry the marker too.

Stop: SIGTERM and SIGCONT (a frozen process cannot act on SIGTERM until continued), wait the grace,
SIGKILL, wait with a deadline. Our own children are reaped; a zombie is an ended process.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

import psutil

# The environment variable that marks a process (and, by inheritance, its descendants) as ours.
MARKER_ENV = "MCP_RL_MARKER"

# psutil reports start times rounded to the clock tick; allow for that when comparing.
_CREATE_TIME_TOLERANCE_S = 0.05
# After SIGKILL a process is gone within milliseconds unless the kernel is stuck on it.
KILL_WAIT_S = 5.0
# Longest a just-started process may show an empty environment (see `marker_of`).
_ENVIRON_SETTLE_S = 0.5


class Liveness(StrEnum):
    """What is at a recorded pid, as far as we may act on it."""

    ALIVE = "alive"
    """Ours, running (or sleeping)."""
    FROZEN = "frozen"
    """Ours, stopped by SIGSTOP/SIGTSTP: it is continued before it is asked to stop."""
    ZOMBIE = "zombie"
    """Ours, exited but not yet reaped by its parent: ended."""
    GONE = "gone"
    """No such process any more (or its pid now belongs to a process started later)."""
    UNPROVEN = "unproven"
    """Something runs at that pid but it cannot be proven to be ours: never signalled."""


LIVE = frozenset({Liveness.ALIVE, Liveness.FROZEN})


@dataclass(frozen=True)
class ProcessIdentity:
    pid: int
    pgid: int
    create_time: float
    marker: str | None = None  # the marker it carries (None when unreadable)


@dataclass(frozen=True)
class Proof:
    """The outcome of `prove`: what runs at a pid and whether we may signal it."""

    pid: int | None
    liveness: Liveness
    reason: str = ""  # in words, when not ALIVE/FROZEN
    process: psutil.Process | None = None
    carried_marker: str | None = None

    @property
    def alive(self) -> bool:
        return self.liveness in LIVE


@dataclass
class Ended:
    """The outcome of `stop`."""

    pid: int | None
    proven: bool
    exit_code: int | None = None
    signalled: list[int] = field(default_factory=list)
    left: list[int] = field(default_factory=list)  # pids of ours still alive after the deadline
    note: str = ""  # in words: why it was not proven ours (nothing done), or what is left


def new_marker(kind: str = "proc") -> str:
    return f"{kind}:{uuid.uuid4().hex}"


def marker_for(kind: str, folder: str | Path) -> str:
    """A marker derived from the folder a piece of work lives in (a run, a smoke test): anyone
    who knows the folder can check it, nothing needs storing. Unique per state directory."""
    return f"{kind}:{folder}"


def marker_of(proc: psutil.Process, marker_env: str = MARKER_ENV) -> str | None:
    """The marker in a process's environment (as it was at exec), or None if absent/unreadable."""
    # For a moment after exec the kernel shows an empty environment (it is filled in after the
    # close-on-exec pipe that Popen waits for is closed): read again until it appears.
    deadline = time.monotonic() + _ENVIRON_SETTLE_S
    while True:
        try:
            environ = proc.environ()
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
            return None
        if environ or time.monotonic() > deadline:
            return environ.get(marker_env) or None
        time.sleep(0.005)  # the exec in flight finishes within microseconds


def spawn(
    argv: Sequence[str],
    log_path: Path,
    env: Mapping[str, str],
    cwd: Path | None = None,
    marker: str | None = None,
    pass_fds: Sequence[int] = (),
) -> subprocess.Popen[bytes]:
    """Start `argv` in a new session with its output appended to `log_path`, carrying `marker`.

    Without `marker` it keeps the one `env` carries (a worker's children stay its own), else gets
    a fresh one; `identify` reads it back. `pass_fds` stay open in the child (the locks of the
    leases and destinations it holds for its whole life).
    """
    log_path.parent.mkdir(parents=True, exist_ok=True)
    child_env = dict(env)
    child_env[MARKER_ENV] = marker or child_env.get(MARKER_ENV) or new_marker()
    with open(log_path, "ab") as log:
        return subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=child_env,
            cwd=cwd,
            start_new_session=True,
            close_fds=True,
            pass_fds=tuple(pass_fds),
        )


def reap_in_background(popen: subprocess.Popen[bytes]) -> None:
    """Collect a detached child's exit when it ends, so a long-lived parent keeps no zombie.
    (If the parent exits first, the child is re-parented and reaped by init.)"""
    threading.Thread(target=popen.wait, name=f"reap-{popen.pid}", daemon=True).start()


def identify(pid: int) -> ProcessIdentity | None:
    """The identity of a live process (pid, group, start time, marker), or None if it is gone."""
    try:
        proc = psutil.Process(pid)
        return ProcessIdentity(pid=pid, pgid=os.getpgid(pid), create_time=proc.create_time(), marker=marker_of(proc))
    except (psutil.NoSuchProcess, ProcessLookupError):
        return None


def started_at(pid: int | None = None) -> float | None:
    """When the process (this one by default) started, as Unix time, to the kernel's clock tick.

    For timing start-ups: psutil's `create_time` adds the boot time, which Linux gives in whole
    seconds, so it may be up to a second off `time.time()` (it stays right for telling processes
    apart, as it is the same for every process). Here the process's age comes from the boot clock.
    None where /proc does not say (then `create_time` is the best there is).
    """
    try:
        stat = Path(f"/proc/{pid or 'self'}/stat").read_text()
        ticks = int(stat.rsplit(")", 1)[1].split()[19])  # field 22, starttime, in clock ticks since boot
        age = time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):
        return None
    return time.time() - age


def _same_start(actual: float, recorded: float) -> bool:
    return abs(actual - recorded) <= _CREATE_TIME_TOLERANCE_S


def prove(pid: int | None, create_time: float | None, marker: str | None, marker_env: str = MARKER_ENV) -> Proof:
    """Is the process recorded as (`pid`, `create_time`) still there, and provably ours?

    Proven: start time matches and the process carries `marker` (without `marker`: carries a
    marker of ours at all); or it is our own unreaped child (then `marker`, if given, must match
    too). Anything else running at `pid` is UNPROVEN.
    """
    if not pid:
        return Proof(pid, Liveness.GONE, "no pid was recorded")
    if pid <= 1 or pid == os.getpid():
        return Proof(pid, Liveness.UNPROVEN, f"pid {pid} is {'init' if pid <= 1 else 'this very process'}")
    try:
        proc = psutil.Process(pid)
        started = proc.create_time()
        status = proc.status()
        is_child = proc.ppid() == os.getpid()
    except psutil.NoSuchProcess:
        return Proof(pid, Liveness.GONE, f"pid {pid} has ended")
    except psutil.AccessDenied:
        return Proof(pid, Liveness.UNPROVEN, f"pid {pid} cannot be inspected (access denied)")
    if create_time is not None and not _same_start(started, create_time):
        return Proof(pid, Liveness.GONE, f"pid {pid} has ended (the pid now belongs to a process started later)")
    if create_time is None and not is_child:
        return Proof(pid, Liveness.UNPROVEN, f"pid {pid} has no recorded start time, so it cannot be proven ours")
    if status == psutil.STATUS_ZOMBIE:
        return Proof(pid, Liveness.ZOMBIE, f"pid {pid} has exited (zombie, not yet reaped by its parent)", proc)
    carried = marker_of(proc, marker_env)
    if marker is not None and carried != marker:
        return Proof(
            pid, Liveness.UNPROVEN, f"pid {pid} does not carry the marker {marker_env}={marker}", proc, carried
        )
    if marker is None and not is_child and carried is None:
        # A caller with no marker to compare still needs one of ours there (and the start time).
        return Proof(pid, Liveness.UNPROVEN, f"pid {pid} carries no {marker_env}, so it cannot be proven ours", proc)
    frozen = status in (psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP)
    return Proof(pid, Liveness.FROZEN if frozen else Liveness.ALIVE, "", proc, carried)


def is_alive(pid: int | None, create_time: float | None) -> bool:
    """True if `pid` runs and is the process started at `create_time` (not a recycled pid).

    Read-only: it never signals, so the start time is enough; a missing start time proves
    nothing and answers False. To signal, use `prove` (which also wants the marker) or `stop`.
    """
    if not pid or create_time is None or pid <= 1:
        return False
    try:
        proc = psutil.Process(pid)
        return _same_start(proc.create_time(), create_time) and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def count_descendants(pid: int | None) -> int | None:
    """How many live processes descend from `pid` (None: it is gone). Read-only."""
    if not pid or pid <= 1:
        return None
    try:
        under = psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return None
    return sum(1 for p in under if _running(p))


def _running(proc: psutil.Process) -> bool:
    try:
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


def _marked(pgid: int, marker: str, marker_env: str, under: psutil.Process | None) -> dict[int, psutil.Process]:
    """Processes carrying `marker` that are in group `pgid` or descendants of `under`."""
    found: dict[int, psutil.Process] = {}
    if under is not None:
        try:
            for child in under.children(recursive=True):
                if marker_of(child, marker_env) == marker:
                    found[child.pid] = child
        except psutil.NoSuchProcess:
            pass
    for proc in psutil.process_iter():
        if proc.pid in found or proc.pid <= 1 or proc.pid == os.getpid():
            continue
        try:
            if os.getpgid(proc.pid) == pgid and marker_of(proc, marker_env) == marker:
                found[proc.pid] = proc
        except (ProcessLookupError, psutil.NoSuchProcess, PermissionError):
            continue
    return found


def _signal(procs: Sequence[psutil.Process], group: int | None, sigs: Sequence[signal.Signals]) -> None:
    for sig in sigs:
        if group is not None:
            # The whole (proven) group: also reaches members started after we looked.
            try:
                os.killpg(group, sig)
            except (ProcessLookupError, PermissionError):
                pass
        for proc in procs:  # members that left the group (setsid) are signalled one by one
            try:
                proc.send_signal(sig)
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                pass


def stop(
    pid: int | None,
    pgid: int | None,
    create_time: float | None,
    marker: str | None,
    grace_s: float,
    kill_wait_s: float = KILL_WAIT_S,
    marker_env: str = MARKER_ENV,
) -> Ended:
    """End a process, its group and its descendants, if they are provably ours.

    SIGTERM + SIGCONT, up to `grace_s` to exit, then SIGKILL and up to `kill_wait_s`. The group is
    signalled as a whole only while its leader is proven alive; otherwise (leader gone) only its
    members that carry `marker` are. Returns what was done and what is left, in words.
    """
    proof = prove(pid, create_time, marker, marker_env)
    if proof.liveness == Liveness.UNPROVEN:
        return Ended(pid, proven=False, note=proof.reason)
    pgid = pgid or pid
    expected = marker or proof.carried_marker
    leader = proof.process if proof.alive else None
    # Collect everything up front: once the leader dies its children are re-parented and the
    # tree can no longer be walked from it.
    procs: dict[int, psutil.Process] = {}
    if leader is not None:
        procs[leader.pid] = leader
    if expected and pgid:
        procs.update(_marked(pgid, expected, marker_env, leader))
    if proof.liveness == Liveness.ZOMBIE and proof.process is not None:
        procs[proof.process.pid] = proof.process  # reaped below if it is our child
    if not procs:
        return Ended(pid, proven=True, note=proof.reason)
    # killpg only for a group whose leader is proven alive and leads it.
    group = pgid if leader is not None and pgid == leader.pid else None
    codes: dict[int, int] = {}
    _signal(list(procs.values()), group, (signal.SIGTERM, signal.SIGCONT))
    alive = _wait(list(procs.values()), grace_s, codes)
    if alive:
        # The group as a whole only while its (proven) leader still runs: an emptied group's id
        # could in principle be someone else's by now.
        still_led = group is not None and leader is not None and leader.is_running()
        _signal(alive, group if still_led else None, (signal.SIGKILL,))
        alive = _wait(alive, kill_wait_s, codes)
    still = [p.pid for p in alive]
    note = f"pids {still} still alive {kill_wait_s:g} s after SIGKILL" if still else ""
    return Ended(pid, proven=True, exit_code=codes.get(pid or -1), signalled=sorted(procs), left=still, note=note)


def _ended(proc: psutil.Process, codes: dict[int, int]) -> bool:
    """True once `proc` has exited; reaps it (recording its exit code) when it is our child."""
    try:
        if proc.ppid() == os.getpid():
            try:
                pid, status = os.waitpid(proc.pid, os.WNOHANG)
            except ChildProcessError:  # reaped elsewhere (e.g. by its Popen)
                return True
            if pid:
                codes[proc.pid] = os.waitstatus_to_exitcode(status)
                return True
            return False
        # A zombie has ended: only its parent can reap it.
        return not proc.is_running() or proc.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _wait(procs: Sequence[psutil.Process], timeout_s: float, codes: dict[int, int]) -> list[psutil.Process]:
    """Wait up to `timeout_s` for `procs` to end; returns those still running."""
    deadline = time.monotonic() + max(0.0, timeout_s)
    alive = list(procs)
    while True:
        alive = [p for p in alive if not _ended(p, codes)]
        remaining = deadline - time.monotonic()
        if not alive or remaining <= 0:
            return alive
        time.sleep(min(0.05, remaining))  # polling exits of processes that may not be our children


def stop_group(
    pid: int,
    pgid: int | None,
    create_time: float | None,
    grace_s: float,
    marker: str | None = None,
    marker_env: str = MARKER_ENV,
) -> int | None:
    """`stop`, returning only the exit code of `pid` when it is our child and we reaped it."""
    return stop(pid, pgid, create_time, marker, grace_s, marker_env=marker_env).exit_code


def continue_if_frozen(proof: Proof) -> bool:
    """SIGCONT a proven, frozen process so it can act on what it is asked; True if it was frozen."""
    if proof.liveness != Liveness.FROZEN or proof.process is None:
        return False
    try:
        proof.process.send_signal(signal.SIGCONT)
    except psutil.NoSuchProcess:
        return False
    return True


def wait_until(condition: Callable[[], bool], deadline: float, poll_s: float = 0.1) -> bool:
    """Poll `condition` until it holds or the monotonic `deadline` passes; True if it held."""
    while True:
        if condition():
            return True
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        time.sleep(min(poll_s, remaining))  # polling another process's state, with a deadline
