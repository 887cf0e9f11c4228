"""Interpreters of their own for environment families whose packages cannot share mcp-rl's.

verifiers 0.4.0 pins `mcp==2.0.0` and openenv 0.10.0 needs `fastmcp<4` (so `mcp<2`), while
mcp-rl runs on mcp 2.3: neither can ever be imported here. Each family gets a virtual
environment under the state directory (or MCP_RL_FAMILIES_DIR), one per family and pinned
version, made on first use from the package index and reused; the family's environment
processes, discovery and smoke tests run in it. mcp-rl's own interpreter only spawns it.

Building is a background job (a detached `python -m mcp_rl.environments.families build NAME`
child, its pip output in a log beside the venv) with a deadline; `status()` reports progress
(the log's last line and the seconds so far), and a failure keeps pip's error for the caller.
A venv counts as made only once `family.json` says `ready`: a build that died half way is
started over, never used.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from enum import StrEnum
from pathlib import Path

import psutil
from pydantic import BaseModel

from mcp_rl.atomic import write_text_atomic
from mcp_rl.locking import LockTimeout, exclusive_lock
from mcp_rl.processes import reap_in_background, spawn
from mcp_rl.settings import Settings


class Family(StrEnum):
    OPENENV = "openenv"
    VERIFIERS = "verifiers"


# The pinned version of each family (its folder's name) and its pinned packages.
VERSIONS: dict[Family, str] = {Family.OPENENV: "0.10.0", Family.VERIFIERS: "0.4.0"}
# `uv` beside verifiers: its null harness runs its chat
# program with `uv sync --script`, and falls back to `pip install --user uv`, which fails in a venv.
PINS: dict[Family, tuple[str, ...]] = {
    Family.OPENENV: (f"openenv=={VERSIONS[Family.OPENENV]}",),
    Family.VERIFIERS: (f"verifiers=={VERSIONS[Family.VERIFIERS]}", "uv==0.13.9"),
}
# What each family's interpreter must import once made (checked before it counts as ready).
PROBES: dict[Family, str] = {
    Family.OPENENV: "import openenv.core.env_server.http_server",
    Family.VERIFIERS: "import verifiers.v1",
}
# Seconds a build may take before it is stopped and reported failed (a cold openenv install
# downloads ~150 MB: gradio, pandas, fastmcp).
DEFAULT_BUILD_DEADLINE_S = 1800.0
STATUS_FILE = "family.json"


class BuildState(StrEnum):
    ABSENT = "absent"
    BUILDING = "building"
    READY = "ready"
    FAILED = "failed"


class FamilyStatus(BaseModel):
    family: Family
    state: BuildState
    folder: Path
    python: Path
    packages: list[str]
    detail: str = ""
    seconds: float | None = None

    @property
    def ready(self) -> bool:
        return self.state is BuildState.READY


class FamilyBuildError(RuntimeError):
    """A family interpreter could not be made; the message says why and what to do."""


def key(family: Family) -> str:
    """Folder name: the family and its pinned versions (a new pin is a new interpreter)."""
    return f"{family.value}-{VERSIONS[family]}"


def families_dir(settings: Settings) -> Path:
    return settings.families_dir or settings.home / "families"


def folder(settings: Settings, family: Family) -> Path:
    return families_dir(settings) / key(family)


def python_of(venv_folder: Path) -> Path:
    return venv_folder / "venv" / "bin" / "python"


def _read(path: Path) -> dict[str, object]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write(path: Path, data: dict[str, object]) -> None:
    write_text_atomic(path, json.dumps(data))


def _log_tail(log: Path) -> str:
    try:
        lines = [line.strip() for line in log.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return ""
    return lines[-1][:300] if lines else ""


def status(settings: Settings, family: Family) -> FamilyStatus:
    base = folder(settings, family)
    data = _read(base / STATUS_FILE)
    raw_state = data.get("state")
    state = BuildState(raw_state) if raw_state in {s.value for s in BuildState} else BuildState.ABSENT
    seconds = data.get("seconds")
    detail = str(data.get("error") or "")
    if state is BuildState.BUILDING:
        started = data.get("started")
        if isinstance(started, (int, float)):
            seconds = time.time() - started
        detail = _log_tail(base / "build.log")
    if state is BuildState.READY and not python_of(base).exists():
        state, detail = BuildState.ABSENT, "the interpreter was removed"
    return FamilyStatus(
        family=family,
        state=state,
        folder=base,
        python=python_of(base),
        packages=list(PINS[family]),
        detail=detail,
        seconds=float(seconds) if isinstance(seconds, (int, float)) else None,
    )


def all_statuses(settings: Settings) -> list[FamilyStatus]:
    return [status(settings, family) for family in Family]


def _run(what: str, argv: list[str], log: Path, deadline: float) -> None:
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise FamilyBuildError(f"{what}: the build's deadline passed")
    with open(log, "ab") as out:
        out.write(("$ " + " ".join(argv) + "\n").encode())
        out.flush()
        try:
            proc = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, timeout=remaining, check=False)
        except subprocess.TimeoutExpired:
            raise FamilyBuildError(f"{what} did not finish before the build's deadline (log: {log})") from None
    if proc.returncode != 0:
        raise FamilyBuildError(f"{what} failed (exit {proc.returncode}): {_log_tail(log)} (log: {log})")


def build(settings: Settings, family: Family, deadline_s: float = DEFAULT_BUILD_DEADLINE_S) -> FamilyStatus:
    """Make the family's interpreter unless it is ready (blocking; one builder at a time)."""
    base = folder(settings, family)
    base.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + deadline_s
    try:
        with exclusive_lock(base.parent / f"{key(family)}.lock", timeout_s=deadline_s):
            current = status(settings, family)
            if current.ready:
                return current
            started = time.time()
            log = base / "build.log"
            _write(base / STATUS_FILE, {"state": BuildState.BUILDING.value, "started": started, "pid": os.getpid()})
            shutil.rmtree(base / "venv", ignore_errors=True)
            log.write_text("")
            try:
                # The venv module of this interpreter makes a venv on its base Python (>= 3.11,
                # which both families accept). pip's own cache (outside any checkout) is kept,
                # so a second machine state or a CI run downloads nothing twice.
                # pip of this interpreter installs into the venv (`--python`): no ensurepip
                # copy of pip in every family venv (seconds, and nothing there needs it).
                own_pip = importlib.util.find_spec("pip") is not None
                venv_argv = [sys.executable, "-m", "venv", *(["--without-pip"] if own_pip else []), str(base / "venv")]
                _run("creating the venv", venv_argv, log, deadline)
                python = str(python_of(base))
                pip = [sys.executable, "-m", "pip", "--python", python] if own_pip else [python, "-m", "pip"]
                pip += ["install", "--disable-pip-version-check", "--progress-bar", "off"]
                _run(f"installing {' '.join(PINS[family])}", [*pip, *PINS[family]], log, deadline)
                _run(f"importing {family.value}", [python, "-c", PROBES[family]], log, deadline)
            except FamilyBuildError as exc:
                _write(base / STATUS_FILE, {"state": BuildState.FAILED.value, "error": str(exc)})
                raise
            seconds = round(time.time() - started, 1)
            _write(
                base / STATUS_FILE,
                {"state": BuildState.READY.value, "seconds": seconds, "packages": list(PINS[family])},
            )
    except LockTimeout:
        raise FamilyBuildError(f"another build of {key(family)} held its lock past the deadline") from None
    return status(settings, family)


def start_build(settings: Settings, family: Family, deadline_s: float = DEFAULT_BUILD_DEADLINE_S) -> FamilyStatus:
    """Start making the interpreter in the background (unless it is ready or being made)."""
    current = status(settings, family)
    if current.ready or current.state is BuildState.BUILDING and _builder_alive(current.folder):
        return current
    base = folder(settings, family)
    base.mkdir(parents=True, exist_ok=True)
    # Say `building` at once; the builder rewrites it with its pid once it holds the lock.
    _write(base / STATUS_FILE, {"state": BuildState.BUILDING.value, "started": time.time()})
    argv = [sys.executable, "-m", "mcp_rl.environments.families", "build", family.value, "--deadline", str(deadline_s)]
    # pip runs packages' build code: it gets the user-code environment (no key of ours)
    reap_in_background(spawn(argv, base / "builder.log", settings.user_code_env()))
    return status(settings, family)


def _builder_alive(base: Path) -> bool:
    data = _read(base / STATUS_FILE)
    pid, started = data.get("pid"), data.get("started")
    if not isinstance(pid, int) or not isinstance(started, (int, float)):
        return False
    try:
        process = psutil.Process(pid)
        # The builder wrote `started` after it began: a process created later is a reused pid.
        return process.create_time() <= started + 1.0 and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def interpreter(settings: Settings, family: Family) -> Path:
    """The ready interpreter, or a FamilyBuildError saying how to get it."""
    current = status(settings, family)
    if current.ready:
        return current.python
    how = "it is being made" if current.state is BuildState.BUILDING else "it is not made yet"
    if current.state is BuildState.FAILED:
        how = f"making it failed: {current.detail}"
    raise FamilyBuildError(
        f"the {family.value} interpreter ({', '.join(current.packages)}) is not ready: {how}. "
        f"Run `python -m mcp_rl.environments.families build {family.value}` (or select a "
        f"{family.value}: environment again, which starts it in the background)."
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mcp_rl.environments.families")
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="make a family's interpreter (blocking)")
    b.add_argument("family", choices=[f.value for f in Family])
    b.add_argument("--deadline", type=float, default=DEFAULT_BUILD_DEADLINE_S)
    sub.add_parser("list", help="the family interpreters and their state")
    args = parser.parse_args(argv)
    settings = Settings.from_env()
    if args.command == "list":
        for s in all_statuses(settings):
            print(json.dumps(s.model_dump(mode="json")))
        return 0
    try:
        result = build(settings, Family(args.family), args.deadline)
    except FamilyBuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"{result.family.value}: {result.state.value} in {result.seconds} s: {result.python}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
