"""The streamable HTTP transport: loopback by default, bearer token enforced, refusal without one.

Real server processes (`python -m mcp_rl serve --transport http`) on free loopback ports, real
HTTP requests and a real MCP client.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from mcp_rl.http_auth import bind_policy, is_loopback
from mcp_rl.errors import UserError
from mcp_rl.supervisor.ports import allocate_ports
from tests.conftest import REPO, make_env

TOKEN = "test-token-4f1c2a9e-never-logged"
READY_DEADLINE_S = 60.0
INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
}


@contextmanager
def http_server(home: Path, host: str = "127.0.0.1", token: str | None = None) -> Iterator[tuple[str, Path]]:
    port = allocate_ports(1)[0]
    env = make_env(home)
    env["PATH"] = os.environ.get("PATH", "")
    if token:
        env["MCP_RL_TOKEN"] = token
    log = home / "server.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "mcp_rl", "serve", "--transport", "http", "--host", host, "--port", str(port)],
            env=env, cwd=REPO, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )
    try:
        deadline = time.monotonic() + READY_DEADLINE_S
        while True:
            if proc.poll() is not None:
                raise AssertionError(f"server exited with {proc.returncode}:\n{log.read_text()}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise AssertionError(f"server not listening after {READY_DEADLINE_S}s:\n{log.read_text()}")
                time.sleep(0.05)  # readiness probe interval
        yield f"http://127.0.0.1:{port}/mcp", log
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def post(url: str, body: dict, token: str | None = None) -> tuple[int, dict[str, str], bytes]:
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


# --- the policy ---------------------------------------------------------------------------------
@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "localhost", "::1", "[::1]"])
def test_loopback_hosts(host: str) -> None:
    assert is_loopback(host)
    assert bind_policy(host, None) is None


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.168.1.10", "example.org", ""])
def test_other_hosts_need_a_token(host: str) -> None:
    assert not is_loopback(host)
    with pytest.raises(UserError, match="MCP_RL_TOKEN"):
        bind_policy(host, None)
    with pytest.raises(UserError):
        bind_policy(host, "   ")
    assert bind_policy(host, "abc") == "abc"


def test_non_local_bind_without_token_refuses_to_start(home: Path) -> None:
    port = allocate_ports(1)[0]
    env = make_env(home)
    env["PATH"] = os.environ.get("PATH", "")
    done = subprocess.run(
        [sys.executable, "-m", "mcp_rl", "serve", "--transport", "http", "--host", "0.0.0.0", "--port", str(port)],
        env=env, cwd=REPO, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60,
    )
    assert done.returncode != 0
    assert "MCP_RL_TOKEN" in done.stderr and "0.0.0.0" in done.stderr
    # Refused before binding: nothing listens on the port.
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()


# --- the running server -------------------------------------------------------------------------
def test_token_is_enforced(home: Path) -> None:
    with http_server(home, token=TOKEN) as (url, log):
        status, headers, body = post(url, INIT)
        assert status == 401
        assert headers.get("www-authenticate", headers.get("WWW-Authenticate", "")).startswith("Bearer")
        assert json.loads(body)["error"] == "invalid_request"

        status, headers, body = post(url, INIT, token="wrong-" + TOKEN)
        assert status == 401
        assert json.loads(body)["error"] == "invalid_token"

        status, _, _ = post(url, INIT, token=TOKEN[:-1])  # a prefix is not the token
        assert status == 401

        status, headers, body = post(url, INIT, token=TOKEN)
        assert status == 200, body
        assert b'"serverInfo"' in body and b'"mcp-rl"' in body
    assert TOKEN not in log.read_text()


def test_non_local_bind_with_token_serves_and_enforces(home: Path) -> None:
    with http_server(home, host="0.0.0.0", token=TOKEN) as (url, log):
        assert post(url, INIT)[0] == 401
        assert post(url, INIT, token="nope")[0] == 401
        assert post(url, INIT, token=TOKEN)[0] == 200
        assert "bearer token required" in log.read_text()


def test_loopback_without_token_needs_none(home: Path) -> None:
    with http_server(home) as (url, log):
        status, _, body = post(url, INIT)
        assert status == 200, body
        assert "no token (loopback only)" in log.read_text()


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_mcp_client_with_token(home: Path, mode: str) -> None:
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    with http_server(home, token=TOKEN) as (url, _):
        async with create_mcp_http_client(headers={"Authorization": f"Bearer {TOKEN}"}) as http:
            async with Client(streamable_http_client(url, http_client=http), mode=mode) as client:
                tools = {t.name for t in (await client.list_tools()).tools}
                assert {"rl_list_environments", "rl_select_environment"} <= tools
                result = await client.call_tool("rl_list_environments", {})
                assert not result.is_error
                assert any(p.endswith("bundled") for p in result.structured_content["searched"])

        async with create_mcp_http_client(headers={"Authorization": "Bearer wrong"}) as http:
            with pytest.raises(Exception):
                async with Client(streamable_http_client(url, http_client=http), mode=mode) as client:
                    await client.list_tools()
