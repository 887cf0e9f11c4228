"""An MCP server leaves its environment's process group (the SDK's stdio client starts it in a
session of its own), so ending a run's groups alone would miss it: it carries the run's marker,
is counted among the environment's live descendants (rl_check_status), and the run's stop ends
it by that marker."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import psutil

from mcp_rl import processes
from mcp_rl.environments.mcp_family.server import mcp_server_env
from mcp_rl.settings import Settings
from tests.mcp_family.kit import TINY_SERVER, write_task

# A stand-in for the environment process: opens one server session and holds it.
HOLDER = """
import anyio, sys
from mcp_rl.environments.mcp_family.server import open_server
from mcp_rl.environments.mcp_family.taskfile import load

async def main():
    async with open_server(load(sys.argv[1])):
        print("open", flush=True)
        await anyio.sleep(600)

anyio.run(main)
"""


def _servers(under: int) -> list[psutil.Process]:
    try:
        tree = psutil.Process(under).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    return [p for p in tree if str(TINY_SERVER) in " ".join(p.cmdline())]


def test_the_server_carries_the_marker_but_no_other_variable() -> None:
    env = mcp_server_env([], {"PATH": "/bin", processes.MARKER_ENV: "run-marker", "OTHER": "x"})
    assert env == {"PATH": "/bin", processes.MARKER_ENV: "run-marker"}


def test_a_runs_stop_ends_the_server_its_environment_started(settings: Settings, tmp_path: Path) -> None:
    task_file = write_task(tmp_path)
    script = tmp_path / "holder.py"
    script.write_text(HOLDER)
    log = tmp_path / "holder.log"
    holder = processes.spawn([sys.executable, str(script), str(task_file)], log, settings.user_code_env())
    ident = processes.identify(holder.pid)
    assert ident is not None and ident.marker
    deadline = time.monotonic() + 60
    while not _servers(holder.pid):
        assert holder.poll() is None, log.read_text()
        assert time.monotonic() < deadline, "the server did not start within 60 s"
        time.sleep(0.1)
    (server,) = _servers(holder.pid)
    assert os.getpgid(server.pid) != ident.pgid  # out of the environment's group
    assert processes.marker_of(server) == ident.marker
    counted = processes.count_descendants(holder.pid)
    assert counted is not None and counted >= 1
    ended = processes.stop(holder.pid, ident.pgid, ident.create_time, ident.marker, grace_s=5)
    holder.wait(timeout=10)
    assert server.pid in ended.signalled, ended
    assert not server.is_running() or server.status() == psutil.STATUS_ZOMBIE
    assert processes.count_descendants(holder.pid) is None
