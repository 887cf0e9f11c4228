"""The one runner of short-lived children that run user code and answer with one JSON document:
the validator, introspection and config checks (one-shot), the GEM catalog, and the held-out
item counts.

The user's code may print anything, hang, fork, or detach; so the child is kept under control:

- its own session (its own process group), started with `Settings.user_code_env` (no key of
  ours unless the task names it) and a marker (`MCP_RL_MARKER`) its descendants inherit;
- a deadline and a cancel (a `threading.Event`); when the child ends, times out or is cancelled,
  its whole group is killed, then every process still carrying its marker (a grandchild that
  called setsid), so nothing it started survives it, and a `sleep` holding its stdout does not
  keep the wait alive;
- bounded output: stdout and stderr are read as they come and only their first and last
  `KEEP_BYTES` kept (the rest counted and dropped), so a child printing 200 MB costs no memory;
- the report comes on a pipe of its own (`MCP_RL_REPORT_FD`, opened by our child code before the
  user's code is imported), never from stdout, which is just log: a task printing
  `{"ok": true}` reports nothing;
- a lifeline: a pipe whose other end only the parent holds (`MCP_RL_LIFELINE_FD`); when the
  parent dies (even by kill -9), the child reads EOF and kills its own group;
- a record while it runs (`$MCP_RL_HOME/children/*.json`: pid, start time, marker, owner), so a
  restarted server ends a child its dead predecessor left (`end_orphans`).

The child side is `child_main` (or `write_report` for a program that builds its report itself).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import selectors
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
from pydantic import BaseModel

from mcp_rl import processes, redact
from mcp_rl.atomic import write_text_atomic
from mcp_rl.errors import UserError
from mcp_rl.settings import Settings

REPORT_FD_ENV = "MCP_RL_REPORT_FD"
LIFELINE_FD_ENV = "MCP_RL_LIFELINE_FD"
CHILDREN_DIR = "children"
# Of each of stdout and stderr, the first and the last this many bytes are kept.
KEEP_BYTES = 32 * 1024
# The report itself: larger than any report we write (the validator's is a few KiB).
REPORT_CAP_BYTES = 8 * 1024 * 1024
# After the child ended and its group was killed, how long what is left in the pipes is read.
DRAIN_S = 1.0
POLL_S = 0.05


@dataclass
class Captured:
    """One output stream, bounded: its first and last KEEP_BYTES, and how much was dropped."""

    keep: int = KEEP_BYTES
    head: bytearray = field(default_factory=bytearray)
    tail: bytearray = field(default_factory=bytearray)
    total: int = 0

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.keep - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self.tail += chunk
            if len(self.tail) > self.keep:
                del self.tail[: len(self.tail) - self.keep]

    @property
    def dropped(self) -> int:
        return self.total - len(self.head) - len(self.tail)

    def text(self) -> str:
        gap = f"\n[... {self.dropped} bytes not kept ...]\n" if self.dropped else ""
        return self.head.decode("utf-8", "replace") + gap + self.tail.decode("utf-8", "replace")

    def last_lines(self, n: int) -> list[str]:
        return self.text().strip().splitlines()[-n:]


@dataclass
class ChildOutcome:
    """How a child ended: its report (None when it sent none, or not valid JSON) and its output."""

    returncode: int | None
    report: Any = None
    report_error: str | None = None
    stdout: Captured = field(default_factory=Captured)
    stderr: Captured = field(default_factory=Captured)
    timed_out: bool = False
    cancelled: bool = False
    seconds: float = 0.0
    killed: list[int] = field(default_factory=list)  # pids of its own left behind, ended here

    def tail(self, n: int = 15) -> str:
        """The last lines of its stderr (else stdout), for a message."""
        lines = self.stderr.last_lines(n) or self.stdout.last_lines(n)
        return "\n".join(lines) if lines else "no output"


class ChildRecord(BaseModel):
    """A running child, written while it runs, so a later server can end it if this one dies."""

    pid: int
    pgid: int
    create_time: float
    marker: str
    owner_pid: int
    owner_create_time: float
    what: str
    started_at: float


def children_dir(settings: Settings) -> Path:
    return settings.home / CHILDREN_DIR


def _exited(pid: int) -> bool:
    """Whether our child `pid` has exited, WITHOUT reaping it: its pid (and group id) stays ours
    until `wait`, so the group can still be killed by that id with no risk of hitting another."""
    try:
        info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return True
    return info is not None


def kill_marked(marker: str) -> list[int]:
    """SIGKILL every process carrying `marker` (a fresh one per child: carrying it proves the
    process descends from that child, wherever it moved since); returns their pids."""
    killed = []
    me = os.getpid()
    for proc in psutil.process_iter():
        if proc.pid <= 1 or proc.pid == me:
            continue
        try:
            if proc.environ().get(processes.MARKER_ENV) != marker:
                continue
            proc.kill()
            killed.append(proc.pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
            continue
    return killed


def _end_all(pid: int, marker: str) -> list[int]:
    """Kill the child's group (its pid is unreaped, so the group id is proven) and whatever else
    carries its marker; twice, for what was forked while the first pass ran."""
    killed: list[int] = []
    for _ in range(2):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
        killed += [p for p in kill_marked(marker) if p != pid and p not in killed]
    return killed


def run_child(
    settings: Settings,
    module: str | None,
    args: Sequence[str],
    *,
    env: Mapping[str, str],
    timeout_s: float,
    what: str,
    cwd: Path | None = None,
    stdin: bytes | None = None,
    cancel: threading.Event | None = None,
    python: str | Path | None = None,
) -> ChildOutcome:
    """Run `python -m module *args` under control (see the module doc); never raises for what
    the child does: the outcome says it. `env` must come from `Settings.user_code_env` (or
    `introspection_env`, built on it). `python`: another interpreter (a family's venv; default
    this one); `module` None: `python *args` (e.g. `-c CODE`)."""
    marker = processes.new_marker("child")
    report_r, report_w = os.pipe()
    life_r, life_w = os.pipe()
    child_env = dict(env)
    child_env[processes.MARKER_ENV] = marker
    child_env[REPORT_FD_ENV] = str(report_w)
    child_env[LIFELINE_FD_ENV] = str(life_r)
    began = time.monotonic()
    try:
        proc = subprocess.Popen(
            [str(python or sys.executable), *(["-m", module] if module else []), *args],
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=child_env,
            cwd=cwd,
            start_new_session=True,
            close_fds=True,
            pass_fds=(report_w, life_r),
        )
    except BaseException:
        for fd in (report_r, report_w, life_r, life_w):
            os.close(fd)
        raise
    os.close(report_w)
    os.close(life_r)
    record = _record(settings, proc.pid, marker, what)
    outcome = ChildOutcome(returncode=None)
    report = Captured(keep=REPORT_CAP_BYTES)
    assert proc.stdout is not None and proc.stderr is not None
    streams = {proc.stdout.fileno(): outcome.stdout, proc.stderr.fileno(): outcome.stderr, report_r: report}
    if stdin is not None:
        threading.Thread(target=_feed, args=(proc, stdin), name=f"feed-{proc.pid}", daemon=True).start()
    ended = False
    try:
        with selectors.DefaultSelector() as sel:
            for fd in streams:
                sel.register(fd, selectors.EVENT_READ)
            deadline = began + timeout_s
            while True:
                if cancel is not None and cancel.is_set():
                    outcome.cancelled = True
                    break
                if _exited(proc.pid):
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    outcome.timed_out = True
                    break
                _read_ready(sel, streams, min(POLL_S, left))
            outcome.killed = _end_all(proc.pid, marker)
            ended = True
            # What the child wrote before it ended is still in the pipes; everything holding them
            # is dead now, so they reach EOF at once (the drain deadline is only a guard).
            drain_until = time.monotonic() + DRAIN_S
            while sel.get_map() and time.monotonic() < drain_until:
                _read_ready(sel, streams, POLL_S)
    finally:
        if not ended:  # interrupted (an error of ours): nothing of the child may outlive this
            _end_all(proc.pid, marker)
        os.close(life_w)  # the lifeline: a child still alive here would end itself now
        outcome.returncode = proc.wait()
        for stream in (proc.stdout, proc.stderr):
            stream.close()
        os.close(report_r)
        if record is not None:
            record.unlink(missing_ok=True)
    outcome.seconds = time.monotonic() - began
    if report.total:
        if report.dropped:
            outcome.report_error = f"its report was larger than {REPORT_CAP_BYTES} bytes"
        else:
            try:
                outcome.report = json.loads(bytes(report.head))
            except ValueError as exc:
                outcome.report_error = f"its report is not one JSON document ({exc})"
    return outcome


def _feed(proc: subprocess.Popen[bytes], data: bytes) -> None:
    assert proc.stdin is not None
    with contextlib.suppress(OSError):
        proc.stdin.write(data)
    with contextlib.suppress(OSError):
        proc.stdin.close()


def _read_ready(sel: selectors.BaseSelector, streams: dict[int, Captured], timeout: float) -> None:
    for key, _ in sel.select(timeout):
        fd = int(key.fd)
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            chunk = b""
        if chunk:
            streams[fd].add(chunk)
        else:
            sel.unregister(fd)


def _record(settings: Settings, pid: int, marker: str, what: str) -> Path | None:
    ident = processes.identify(pid)
    me = processes.identify(os.getpid())
    if ident is None or me is None:
        return None
    path = children_dir(settings) / f"{marker.split(':', 1)[1]}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    record = ChildRecord(
        pid=pid,
        pgid=ident.pgid,
        create_time=ident.create_time,
        marker=marker,
        owner_pid=me.pid,
        owner_create_time=me.create_time,
        what=what[:200],
        started_at=time.time(),
    )
    write_text_atomic(path, record.model_dump_json())
    return path


def end_orphans(settings: Settings) -> list[str]:
    """End the children whose server died (kill -9) before it could: each proven by pid, start
    time and marker (anything else at that pid is left alone). A child of a server still alive
    is never touched. Returns what was ended, in words."""
    ended = []
    folder = children_dir(settings)
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            record = ChildRecord.model_validate_json(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            path.unlink(missing_ok=True)
            continue
        if processes.is_alive(record.owner_pid, record.owner_create_time):
            continue  # its server still runs and watches it
        proof = processes.prove(record.pid, record.create_time, record.marker)
        if proof.alive or proof.liveness == processes.Liveness.ZOMBIE:
            processes.stop(record.pid, record.pgid, record.create_time, record.marker, grace_s=0.0)
        left = kill_marked(record.marker)
        if proof.alive or left:
            ended.append(f"{record.what} (pid {record.pid})")
        path.unlink(missing_ok=True)
    return ended


def run_json_child(
    settings: Settings,
    module: str,
    args: list[str],
    *,
    doing: str,
    timeout_hint: str,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    timeout_s: float | None = None,
) -> Any:
    """Run the child and return its report; any failure is a UserError that says `doing`.

    `env`: the child's environment (default `settings.user_code_env()`); `timeout_s`: its
    deadline (default MCP_RL_INTROSPECT_TIMEOUT)."""
    timeout = settings.introspect_timeout_s if timeout_s is None else timeout_s
    outcome = run_child(
        settings,
        module,
        args,
        env=settings.user_code_env() if env is None else env,
        timeout_s=timeout,
        what=doing,
        cwd=cwd,
    )
    if outcome.timed_out:
        raise UserError(
            f"{doing} took longer than {timeout:.0f} s. {timeout_hint} (the deadline is MCP_RL_INTROSPECT_TIMEOUT)."
        )
    if outcome.returncode != 0:
        raise UserError(f"{doing} failed (exit {outcome.returncode}). Last lines:\n{outcome.tail()}")
    if outcome.report_error or outcome.report is None:
        raise UserError(f"{doing} ended without its report ({outcome.report_error or 'none sent'}): {outcome.tail(3)}")
    return outcome.report


# --- the child's side ------------------------------------------------------------------------------
_REPORT_FD: int | None = None


def _take_fd(name: str) -> int | None:
    """The fd our parent passed under `name`, taken out of the environment (the user's code and
    what it starts do not inherit it: non-inheritable, and the variable gone)."""
    raw = os.environ.pop(name, None)
    if raw is None or not raw.isdigit():
        return None
    fd = int(raw)
    try:
        os.set_inheritable(fd, False)
    except OSError:
        return None
    return fd


def die_with_parent() -> None:
    """Linux: the kernel kills this process when the thread that started it ends (a parent
    killed with -9 included), even while the user's code holds the GIL."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass  # elsewhere the lifeline below still ends it


def _watch_lifeline(fd: int) -> None:
    """EOF on the lifeline: the parent is gone (or done with us); end this whole group."""
    with contextlib.suppress(OSError):
        while os.read(fd, 1):
            pass
    with contextlib.suppress(OSError):
        os.killpg(os.getpgrp(), signal.SIGKILL)
    os._exit(1)


def take_channels() -> None:
    """First thing a child does, before importing any user code: take the report pipe and the
    lifeline out of reach of what it starts, and start watching the lifeline."""
    global _REPORT_FD
    _REPORT_FD = _take_fd(REPORT_FD_ENV)
    # A key the task named is in this environment: known here too, so a message is scrubbed
    # before this side clips it (a key cut in half would no longer match in the parent).
    with contextlib.suppress(UserError):
        Settings.from_env()  # a Settings teaches mcp_rl.redact the keys it holds
    redact.scrub_std_streams()
    lifeline = _take_fd(LIFELINE_FD_ENV)
    if lifeline is not None:
        die_with_parent()
        threading.Thread(target=_watch_lifeline, args=(lifeline,), name="lifeline", daemon=True).start()


def write_report(result: Any) -> None:
    """Send the report on the report pipe (stdout when run by hand, without our parent)."""
    data = json.dumps(result, default=str)
    if _REPORT_FD is None:
        print(data, file=sys.__stdout__ or sys.stdout, flush=True)
        return
    with os.fdopen(_REPORT_FD, "w", encoding="utf-8") as out:
        out.write(data)


def child_main(produce: Callable[[], Any]) -> int:
    """Body of a child program: the result of `produce` is its report; what the imported code
    prints is log (it goes to stderr, kept bounded by the parent)."""
    take_channels()
    try:
        with contextlib.redirect_stdout(sys.stderr):
            result = produce()
    except Exception:
        traceback.print_exc()
        return 1
    write_report(result)
    return 0
