"""`mcp-rl serve`'s first answer (mcp_rl/first_answer.py): a 2026-07-28 `server/discover` is
answered from the answer an earlier start kept, before the SDK loads, with the very bytes the SDK
sends; everything else reaches the SDK untouched. Real server processes over raw pipes."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from mcp_rl import first_answer
from tests.conftest import REPO, make_env, stdio_params

VERSION = "2026-07-28"
META = {
    "io.modelcontextprotocol/protocolVersion": VERSION,
    "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
    "io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}},
}
FAST_NOTE = "server/discover answered from the kept answer"


def line(request_id: int | str, method: str, **params: Any) -> bytes:
    return (
        json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": {"_meta": META, **params}}) + "\n"
    ).encode()


def session(home: Path, *lines: bytes) -> tuple[list[dict[str, Any]], str, float]:
    """Start a server, write `lines` in one go (as a host that pipelines), read one answer per
    line; the answers in order, the server's stderr, and seconds from spawn to the first answer."""
    started = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "mcp_rl", "serve"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**make_env(home), "PATH": "/usr/bin:/bin"},
        cwd=REPO,
    )
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    proc.stdin.write(b"".join(lines))
    proc.stdin.flush()
    answers = [json.loads(proc.stdout.readline())]
    first_s = time.monotonic() - started
    answers += [json.loads(proc.stdout.readline()) for _ in lines[1:]]
    proc.stdin.close()  # end of input reaches the SDK through the relay: the server exits
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 0, err
    return answers, err, first_s


def test_the_kept_answer_is_the_sdks_own_and_the_rest_reaches_the_sdk(home: Path) -> None:
    # A first start has nothing kept: the SDK answers (and the answer is kept once the server's
    # surface is registered, which tools/list asks for).
    (sdk_discover, sdk_tools), err, _ = session(home, line(1, "server/discover"), line(2, "tools/list"))
    assert FAST_NOTE not in err
    kept_at = home / "cache" / first_answer.FILE_NAME
    assert kept_at.is_file()
    # The next start answers from what was kept, pipelined requests after it in order.
    (discover, tools, call), err, first_s = session(
        home,
        line("a-1", "server/discover"),
        line(2, "tools/list"),
        line(3, "tools/call", name="rl_list_runs", arguments={}),
    )
    assert FAST_NOTE in err
    assert discover["id"] == "a-1" and discover["result"] == sdk_discover["result"]
    assert tools == sdk_tools and call["id"] == 3 and call["result"]["isError"] is False
    assert first_s < 30


def test_anything_but_a_well_formed_discover_goes_to_the_sdk(home: Path) -> None:
    session(home, line(1, "server/discover"), line(2, "tools/list"))  # keeps the answer
    other_version = line(1, "server/discover")
    other_version = other_version.replace(VERSION.encode(), b"2099-01-01")
    answers, err, _ = session(home, other_version)
    assert FAST_NOTE not in err and "error" in answers[0]  # the SDK's refusal, not our answer
    # Today's hosts open with initialize: the handshake is the SDK's, as before.
    params = stdio_params(home)

    async def legacy() -> int:
        async with Client(params, mode="legacy") as client:
            return len((await client.list_tools()).tools)

    import anyio  # only this test drives an async client

    assert anyio.run(legacy) > 10


def test_the_sdks_own_client_connects_on_the_kept_answer(home: Path, tmp_path: Path) -> None:
    session(home, line(1, "server/discover"), line(2, "tools/list"))  # keeps the answer
    log = tmp_path / "server.log"
    serve = f"exec {shlex.quote(sys.executable)} -m mcp_rl serve 2>>{shlex.quote(str(log))}"
    params = stdio_params(home).model_copy(update={"command": "/bin/sh", "args": ["-c", serve]})

    async def modern() -> tuple[str | None, int, bool]:
        async with Client(params) as client:  # probes server/discover first, as Claude Code does
            tools = await client.list_tools()
            called = await client.call_tool("rl_list_runs", {})
            return client.protocol_version, len(tools.tools), called.is_error

    import anyio  # only this test and the one above drive an async client

    version, tools, failed = anyio.run(modern)
    assert version == VERSION and tools > 10 and not failed
    assert FAST_NOTE in log.read_text()  # the server's stderr: the kept answer was used


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        ({"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": META}}, True),
        ({"jsonrpc": "2.0", "id": "x", "method": "server/discover", "params": {"_meta": META}}, True),
        ({"jsonrpc": "2.0", "method": "server/discover", "params": {"_meta": META}}, False),  # a notification
        ({"jsonrpc": "2.0", "id": True, "method": "server/discover", "params": {"_meta": META}}, False),
        ({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"_meta": META}}, False),
        ({"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {}}, False),
        ({"jsonrpc": "2.0", "id": 1, "method": "server/discover"}, False),
        (
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "server/discover",
                "params": {"_meta": {**META, "io.modelcontextprotocol/clientCapabilities": None}},
            },
            False,
        ),
        (
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "server/discover",
                "params": {"_meta": {**META, "io.modelcontextprotocol/clientInfo": {"name": "t"}}},
            },
            False,
        ),
        ([1, 2], False),
    ],
)
def test_only_a_well_formed_discover_at_the_kept_version_is_answered_here(message: Any, expected: bool) -> None:
    assert first_answer.answerable(message, VERSION) is expected


def test_a_kept_answer_of_other_code_is_not_used(tmp_path: Path) -> None:
    path = tmp_path / first_answer.FILE_NAME
    kept = first_answer.Kept(VERSION, {"capabilities": {}})
    first_answer.keep(path, "key-a", kept)
    assert first_answer.read_kept(path, "key-a") == kept
    assert first_answer.read_kept(path, "key-b") is None
    path.write_text("{not json", encoding="utf-8")
    assert first_answer.read_kept(path, "key-a") is None
