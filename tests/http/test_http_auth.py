"""The streamable HTTP transport: Host/Origin checked on every bind, bearer token enforced,
refusal to start without a token (non-loopback) or without an allow-list (wildcard).

Real server processes (`python -m mcp_rl serve --transport http`) on free ports, real HTTP
requests (with the Host and Origin headers a rebinding page or a stranger would send) and a real
MCP client.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from mcp_rl.errors import UserError
from mcp_rl.http_auth import (
    LOOPBACK_NAMES,
    bind_policy,
    host_of_header,
    host_of_origin,
    is_loopback,
    is_wildcard,
)
from mcp_rl.ports import allocate_ports
from tests.conftest import REPO, make_env
from tests.kit.wait import listening, wait_for

TOKEN = "test-token-4f1c2a9e-never-logged"
READY_DEADLINE_S = 60.0
INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
}
EVIL = "rebind.attacker.example"


@dataclass
class Server:
    connect: str  # the address a client connects to
    port: int
    log: Path

    def url(self, host: str | None = None) -> str:
        shown = host or (f"[{self.connect}]" if ":" in self.connect else self.connect)
        return f"http://{shown}:{self.port}/mcp"


def _connectable(bind: str) -> str:
    """Where to connect for a bind: wildcards listen on loopback too."""
    if bind in ("0.0.0.0",):
        return "127.0.0.1"
    if bind == "::":
        return "::1"
    if bind.lower() == "localhost":
        return "127.0.0.1"
    return bind.strip("[]")


def _machine_address() -> str | None:
    """This machine's non-loopback IPv4 address (no packet is sent), or None."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.123", 9))
            address = s.getsockname()[0]
        except OSError:
            return None
    return None if is_loopback(address) else address


def _ipv6() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


@contextmanager
def http_server(
    home: Path,
    host: str = "127.0.0.1",
    token: str | None = None,
    allowed: str | None = None,
    extra_args: tuple[str, ...] = (),
) -> Iterator[Server]:
    port = allocate_ports(1)[0]
    env = make_env(home)
    env["PATH"] = os.environ.get("PATH", "")
    if token:
        env["MCP_RL_TOKEN"] = token
    if allowed:
        env["MCP_RL_ALLOWED_HOSTS"] = allowed
    log = home / f"server-{port}.log"
    connect = _connectable(host)
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "mcp_rl",
                "serve",
                "--transport",
                "http",
                "--host",
                host,
                "--port",
                str(port),
                *extra_args,
            ],
            env=env,
            cwd=REPO,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:

        def ready() -> bool:
            if proc.poll() is not None:
                raise AssertionError(f"server exited with {proc.returncode}:\n{log.read_text()}")
            return listening(connect, port)

        wait_for(ready, READY_DEADLINE_S, f"the server to listen on {connect}:{port} (its log: {log})")
        yield Server(connect=connect, port=port, log=log)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def post(
    server: Server, body: dict, host: str | None = None, origin: str | None = None, token: str | None = None
) -> tuple[int, dict[str, str], bytes]:
    """POST to the server's endpoint with exactly the Host (default: the address connected to),
    Origin and token given."""
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "Host": host
        or (f"[{server.connect}]:{server.port}" if ":" in server.connect else f"{server.connect}:{server.port}"),
    }
    if origin is not None:
        headers["Origin"] = origin
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    connection = http.client.HTTPConnection(server.connect, server.port, timeout=30)
    try:
        connection.request("POST", "/mcp", body=json.dumps(body).encode(), headers=headers)
        response = connection.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        connection.close()


def assert_host_and_origin_checked(server: Server, good_host: str, token: str | None = None) -> None:
    """A request naming the server passes; a rebinding Host or a foreign Origin is refused."""
    good = f"[{good_host}]" if ":" in good_host else good_host
    status, _, body = post(server, INIT, host=f"{good}:{server.port}", token=token)
    assert status == 200, body
    assert post(server, INIT, host=good, token=token)[0] == 200  # no port: still this server
    status, _, body = post(server, INIT, host=f"{EVIL}:{server.port}", token=token)
    assert status == 421 and json.loads(body)["error"] == "invalid_host"
    assert post(server, INIT, host=EVIL, token=token)[0] == 421
    assert post(server, INIT, host=f"{good_host}.{EVIL}:{server.port}", token=token)[0] == 421
    status, _, body = post(server, INIT, host=f"{good}:{server.port}", origin=f"http://{EVIL}", token=token)
    assert status == 403 and json.loads(body)["error"] == "invalid_origin"
    assert post(server, INIT, host=f"{good}:{server.port}", origin="null", token=token)[0] == 403
    status, _, body = post(
        server, INIT, host=f"{good}:{server.port}", origin=f"http://{good}:{server.port}", token=token
    )
    assert status == 200, body
    assert EVIL in server.log.read_text()  # the refusal is logged for the operator


# --- the policy ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "host",
    [
        "127.0.0.1",
        "127.0.0.2",
        "127.255.0.9",
        "localhost",
        "LOCALHOST",
        "localhost.",
        "::1",
        "[::1]",
        "::ffff:127.0.0.1",
    ],
)
def test_loopback_hosts_need_no_token_and_accept_loopback_names(host: str) -> None:
    assert is_loopback(host)
    policy = bind_policy(host, None)
    assert policy.token is None
    assert LOOPBACK_NAMES <= policy.allowed_hosts


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.168.1.10", "example.org", "", "127.1"])
def test_other_hosts_need_a_token(host: str) -> None:
    assert not is_loopback(host)
    with pytest.raises(UserError, match="MCP_RL_TOKEN"):
        bind_policy(host, None, ["example.org"])
    with pytest.raises(UserError):
        bind_policy(host, "   ", ["example.org"])
    assert bind_policy(host, "abc", ["example.org"]).token == "abc"


def test_non_loopback_allow_lists() -> None:
    one = bind_policy("192.168.1.10", "abc")
    assert one.allowed_hosts == {"192.168.1.10"}  # the address itself; no loopback name
    named = bind_policy("192.168.1.10", "abc", ["GPU-Box.example.org."])
    assert named.allowed_hosts == {"192.168.1.10", "gpu-box.example.org"}
    for wildcard in ("0.0.0.0", "::"):
        assert is_wildcard(wildcard)
        with pytest.raises(UserError, match="MCP_RL_ALLOWED_HOSTS"):
            bind_policy(wildcard, "abc")
        assert bind_policy(wildcard, "abc", ["gpu-box"]).allowed_hosts == LOOPBACK_NAMES | {"gpu-box"}
    with pytest.raises(UserError, match="not host names"):
        bind_policy("0.0.0.0", "abc", ["http://gpu-box:8000/"])


def test_header_parsing() -> None:
    assert host_of_header("LocalHost:8000") == "localhost"
    assert host_of_header("[::1]:8000") == "::1"
    assert host_of_header("127.0.0.2") == "127.0.0.2"
    for bad in ("", "a:b", "x/y", "[::1", "user@localhost:1", "localhost:8000 evil"):
        assert host_of_header(bad) is None, bad
    assert host_of_origin("http://LOCALHOST:3000") == "localhost"
    assert host_of_origin("https://[::1]") == "::1"
    for bad in ("null", "file://x", "ftp://localhost", "http://localhost/path", "localhost"):
        assert host_of_origin(bad) is None, bad


def test_non_local_bind_without_token_refuses_to_start(home: Path) -> None:
    port = allocate_ports(1)[0]
    env = make_env(home, MCP_RL_ALLOWED_HOSTS="gpu-box")
    env["PATH"] = os.environ.get("PATH", "")
    done = subprocess.run(
        [sys.executable, "-m", "mcp_rl", "serve", "--transport", "http", "--host", "0.0.0.0", "--port", str(port)],
        env=env,
        cwd=REPO,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode != 0
    assert "MCP_RL_TOKEN" in done.stderr and "0.0.0.0" in done.stderr
    # Refused before binding: nothing listens on the port.
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()


def test_wildcard_bind_without_allow_list_refuses_to_start(home: Path) -> None:
    port = allocate_ports(1)[0]
    env = make_env(home, MCP_RL_TOKEN=TOKEN)
    env["PATH"] = os.environ.get("PATH", "")
    done = subprocess.run(
        [sys.executable, "-m", "mcp_rl", "serve", "--transport", "http", "--host", "0.0.0.0", "--port", str(port)],
        env=env,
        cwd=REPO,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode != 0 and "MCP_RL_ALLOWED_HOSTS" in done.stderr
    assert TOKEN not in done.stderr + done.stdout
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()


# --- every bind checks Host and Origin ------------------------------------------------------------
LOOPBACK_BINDS = [
    ("127.0.0.1", "127.0.0.1"),
    ("127.0.0.2", "127.0.0.2"),  # the SDK protects exactly 127.0.0.1: this ran unprotected
    ("localhost", "localhost"),
    ("LOCALHOST", "localhost"),  # ... and exactly "localhost"
    pytest.param("::1", "::1", marks=pytest.mark.skipif(not _ipv6(), reason="no IPv6 loopback")),
]


@pytest.mark.parametrize(("bind", "good_host"), LOOPBACK_BINDS)
def test_loopback_bind_refuses_a_wrong_host_or_origin(home: Path, bind: str, good_host: str) -> None:
    with http_server(home, host=bind) as server:
        assert_host_and_origin_checked(server, good_host)
        assert "no token (loopback only)" in server.log.read_text()


def test_non_loopback_wildcard_bind_refuses_a_wrong_host_or_origin_and_needs_the_token(home: Path) -> None:
    with http_server(home, host="0.0.0.0", token=TOKEN, allowed="gpu-box.example.org") as server:
        assert_host_and_origin_checked(server, "gpu-box.example.org", token=TOKEN)
        assert_host_and_origin_checked(server, "127.0.0.1", token=TOKEN)  # it listens on loopback too
        good = f"gpu-box.example.org:{server.port}"
        assert post(server, INIT, host=good)[0] == 401
        assert post(server, INIT, host=good, token="nope")[0] == 401
        assert "bearer token required" in server.log.read_text()
    assert TOKEN not in server.log.read_text()


@pytest.mark.skipif(_machine_address() is None, reason="no non-loopback IPv4 address")
def test_non_loopback_address_bind_refuses_a_wrong_host_or_origin(home: Path) -> None:
    address = _machine_address()
    assert address is not None
    with http_server(home, host=address, token=TOKEN) as server:
        assert_host_and_origin_checked(server, address, token=TOKEN)
        assert post(server, INIT, host=f"localhost:{server.port}", token=TOKEN)[0] == 421  # not bound there
        assert post(server, INIT, host=f"{address}:{server.port}")[0] == 401


@pytest.mark.skipif(not _ipv6(), reason="no IPv6")
def test_non_loopback_ipv6_wildcard_bind_refuses_a_wrong_host_or_origin(home: Path) -> None:
    # The allow-list from the command line this time (--allow-host adds to MCP_RL_ALLOWED_HOSTS).
    with http_server(
        home, host="::", token=TOKEN, extra_args=("--allow-host", "gpu-box", "--allow-host", "10.9.8.7")
    ) as server:
        assert_host_and_origin_checked(server, "gpu-box", token=TOKEN)
        assert_host_and_origin_checked(server, "10.9.8.7", token=TOKEN)


# --- the token ------------------------------------------------------------------------------------
def test_token_is_enforced(home: Path) -> None:
    with http_server(home, token=TOKEN) as server:
        status, headers, body = post(server, INIT)
        assert status == 401
        assert headers.get("www-authenticate", "").startswith("Bearer")
        assert json.loads(body)["error"] == "invalid_request"

        status, headers, body = post(server, INIT, token="wrong-" + TOKEN)
        assert status == 401
        assert json.loads(body)["error"] == "invalid_token"

        assert post(server, INIT, token=TOKEN[:-1])[0] == 401  # a prefix is not the token

        status, headers, body = post(server, INIT, token=TOKEN)
        assert status == 200, body
        assert b'"serverInfo"' in body and b'"mcp-rl"' in body
    assert TOKEN not in server.log.read_text()


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_mcp_client_with_token(home: Path, mode: str) -> None:
    from mcp import Client, MCPError
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    with http_server(home, token=TOKEN) as server:
        url = server.url()
        async with (
            create_mcp_http_client(headers={"Authorization": f"Bearer {TOKEN}"}) as client_http,
            Client(streamable_http_client(url, http_client=client_http), mode=mode) as client,
        ):
            tools = {t.name for t in (await client.list_tools()).tools}
            assert {"rl_list_environments", "rl_select_environment"} <= tools
            result = await client.call_tool("rl_list_environments", {})
            assert not result.is_error
            assert any(p.endswith("bundled") for p in result.structured_content["searched"])

        with pytest.raises(ExceptionGroup) as refused:  # the client's task group carries the error
            async with (
                create_mcp_http_client(headers={"Authorization": "Bearer wrong"}) as client_http,
                Client(streamable_http_client(url, http_client=client_http), mode=mode) as client,
            ):
                await client.list_tools()
        assert refused.group_contains(MCPError)
