"""A client that goes away leaves no traceback on the server's stderr (issue 34)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from mcp_rl.cli import client_went_away
from tests.conftest import REPO, make_env

INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
}


def test_a_closed_stdout_ends_the_server_with_one_line_not_a_traceback(home: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "mcp_rl", "serve"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**make_env(home), "PATH": "/usr/bin:/bin"},
        cwd=REPO,
    )
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    proc.stdin.write((json.dumps(INIT) + "\n").encode())
    proc.stdin.flush()
    assert b'"id":1' in proc.stdout.readline()
    proc.stdout.close()  # the client goes away
    try:
        for i in range(20):  # answers to these meet the closed pipe
            proc.stdin.write((json.dumps({"jsonrpc": "2.0", "id": 2 + i, "method": "ping"}) + "\n").encode())
            proc.stdin.flush()
        proc.stdin.close()
    except BrokenPipeError:
        pass  # the server already exited
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 0, err
    assert "Traceback" not in err and "BrokenPipeError" not in err, err
    assert "the client closed the connection" in err


def test_only_broken_pipes_count_as_the_client_going_away() -> None:
    assert client_went_away(BrokenPipeError())
    assert client_went_away(BaseExceptionGroup("g", [BrokenPipeError(), ExceptionGroup("h", [BrokenPipeError()])]))
    assert not client_went_away(BaseExceptionGroup("g", [BrokenPipeError(), ValueError()]))
    assert not client_went_away(OSError())
