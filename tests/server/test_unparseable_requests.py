"""A request the stdio transport cannot parse gets a JSON-RPC error answer (issue 43 item 7): the
real server as a subprocess, spoken to in raw JSON-RPC lines."""

from __future__ import annotations

import json
import selectors
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.conftest import REPO, make_env

DEADLINE_S = 60.0


class RawClient:
    def __init__(self, home: Path) -> None:
        env = make_env(home)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "mcp_rl", "serve"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            cwd=str(REPO),
        )
        self.selector = selectors.DefaultSelector()
        assert self.proc.stdout is not None
        self.selector.register(self.proc.stdout, selectors.EVENT_READ)
        self.buffer = b""

    def send(self, line: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + b"\n")
        self.proc.stdin.flush()

    def answer(self, request_id: object) -> dict[str, Any]:
        """The answer to `request_id` (notifications in between skipped), within the deadline."""
        end = time.monotonic() + DEADLINE_S
        while time.monotonic() < end:
            while b"\n" in self.buffer:
                line, self.buffer = self.buffer.split(b"\n", 1)
                message = json.loads(line)
                if message.get("id") == request_id and ("result" in message or "error" in message):
                    return message
            if self.selector.select(timeout=max(0.0, end - time.monotonic())):
                chunk = self.proc.stdout.read1(1 << 16)  # type: ignore[union-attr]
                if not chunk:
                    break
                self.buffer += chunk
        raise AssertionError(f"no answer to request {request_id!r} within {DEADLINE_S} s")

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait(10)


def test_unparseable_requests_get_a_parse_error_answer_and_the_server_goes_on(home: Path) -> None:
    client = RawClient(home)
    try:
        init = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "raw", "version": "0"},
            },
        }
        client.send(json.dumps(init).encode())
        assert "result" in client.answer(1)
        client.send(b'{"jsonrpc":"2.0","method":"notifications/initialized"}')
        deep = b'{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"rl_list_runs","arguments":{"x":'
        deep += b"[" * 100_000 + b"]" * 100_000 + b"}}}"
        surrogate = (
            b'{"jsonrpc":"2.0","id":"three","method":"tools/call","params":{"name":"rl_list_runs",'
            b'"arguments":{"x":"\\ud800"}}}'
        )
        start = time.monotonic()
        for request_id, line in ((2, deep), ("three", surrogate), (4, b'{"jsonrpc":"2.0","id":4,"method":')):
            client.send(line)
            error = client.answer(request_id)["error"]
            assert error["code"] == -32700 and "could not be read as JSON-RPC" in error["message"], error
            assert len(error["message"]) < 1_000
        assert time.monotonic() - start < 30
        client.send(b'{"jsonrpc":"2.0","id":5,"method":"ping"}')
        assert client.answer(5)["result"] == {}  # still serving
    finally:
        client.close()
