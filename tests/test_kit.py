"""The test kit's own promises: one loopback server for every wire fake (either kind of app,
ready when `start` returns, gone after `stop`) and the one wait helper (a deadline, no fixed sleep)."""

from __future__ import annotations

import time
from http.server import BaseHTTPRequestHandler

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from tests.kit.loopback import LoopbackServer
from tests.kit.wait import WaitTimeout, wait_for


class _Hello(BaseHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        data = b"hello " + self.path.encode()
        self.send_response(200)
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


async def _hello(request: Request) -> PlainTextResponse:
    return PlainTextResponse("hello " + request.url.path)


@pytest.mark.parametrize("kind", ["handler", "asgi"])
def test_a_loopback_server_answers_once_started_and_not_after_stop(kind: str) -> None:
    app = {"handler": _Hello} if kind == "handler" else {"asgi": Starlette(routes=[Route("/{p:path}", _hello)])}
    server = LoopbackServer(f"hello-{kind}", **app)  # type: ignore[arg-type]
    assert server.base_url == f"http://127.0.0.1:{server.port}" and server.port > 0  # known before start
    with server, httpx.Client(trust_env=False, timeout=5) as client:
        assert client.get(f"{server.base_url}/x").text == "hello /x"  # no wait needed: ready on start
    with pytest.raises(httpx.TransportError), httpx.Client(trust_env=False, timeout=2) as client:
        client.get(f"{server.base_url}/x")


def test_a_loopback_server_takes_one_app() -> None:
    with pytest.raises(ValueError, match="either"):
        LoopbackServer("none")
    with pytest.raises(ValueError, match="either"):
        LoopbackServer("both", handler=_Hello, asgi=Starlette())


def test_the_wait_helper_returns_the_value_as_soon_as_it_holds_and_fails_at_its_deadline() -> None:
    began = time.monotonic()
    ready_at = began + 0.2
    assert wait_for(lambda: time.monotonic() >= ready_at and "ready", 10, "the clock") == "ready"
    assert time.monotonic() - began < 5
    with pytest.raises(WaitTimeout, match="timed out after 0.1 s waiting for never"):
        wait_for(lambda: False, 0.1, "never")


def test_shared_test_support_lives_in_the_kit_or_the_fakes() -> None:
    """A helper module (not a test, not a conftest) imported from another test folder belongs in
    tests/kit (or tests/fakes): test support in one place, not in whichever folder wrote it first."""
    import ast
    from pathlib import Path

    tests = Path(__file__).resolve().parent
    homes = {"kit", "fakes", "fixtures"}
    strays: set[str] = set()
    for path in sorted(tests.rglob("*.py")):
        rel = path.relative_to(tests)
        if rel.parts[0] in homes:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ImportFrom) or not (node.module or "").startswith("tests."):
                continue
            parts = node.module.split(".")[1:]
            if parts[0] in homes or parts[-1] == "conftest" or parts[-1].startswith("test_"):
                continue
            if parts[:-1] != list(rel.parts[:-1]):  # a helper of another folder (or of tests/ itself)
                strays.add(f"{rel} imports tests.{'.'.join(parts)}")
    assert strays == set()


def test_the_async_wait_takes_a_plain_or_an_async_condition_and_lets_the_loop_run() -> None:
    import asyncio

    from tests.kit.wait import wait_for_async

    async def main() -> tuple[str, int]:
        flag: list[int] = []
        asyncio.get_running_loop().call_later(0.1, flag.append, 1)  # runs only if the wait yields
        plain = await wait_for_async(lambda: flag and "set", 10, "the flag")

        async def awaited() -> int:
            return len(flag)

        return plain, await wait_for_async(awaited, 10, "the count")

    assert asyncio.run(main()) == ("set", 1)
