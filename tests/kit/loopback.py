"""The one way a wire fake listens: a real HTTP server on a free 127.0.0.1 port, in a daemon
thread of the test process, started and stopped the same way for every fake (Tinker, the Hub,
W&B, OpenRouter, Anthropic, doctor's key checks, a test's own upstream).

Give it either an ASGI app (served by uvicorn, for fakes that need async handlers and long polls)
or an `http.server` handler class (served by `ThreadingHTTPServer`). The socket is bound when the
object is made, so `port` and `base_url` are known before `start()`; `start()` returns once the
server accepts requests (uvicorn: `started`, with a deadline; http.server: at once, the socket is
already listening), and `stop()` ends it and closes the socket.

    server = LoopbackServer("fake Tinker", asgi=build_app(wire))
    with server:
        client = Client(base_url=server.base_url)
"""

from __future__ import annotations

import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

from tests.kit.wait import wait_for

START_DEADLINE_S = 10.0
STOP_JOIN_S = 5.0


class LoopbackServer:
    def __init__(
        self,
        name: str,
        *,
        asgi: Any = None,
        handler: type[BaseHTTPRequestHandler] | None = None,
        port: int = 0,
    ) -> None:
        if (asgi is None) == (handler is None):
            raise ValueError("give a LoopbackServer either an ASGI app or an http.server handler class")
        self.name = name
        self._uvicorn: Any = None
        self._http: ThreadingHTTPServer | None = None
        self._sock: socket.socket | None = None
        if asgi is not None:
            import uvicorn  # only the fakes that serve an ASGI app need it

            self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self._sock.bind(("127.0.0.1", port))
            self.port = int(self._sock.getsockname()[1])
            config = uvicorn.Config(asgi, log_level="warning", access_log=False, lifespan="off")
            self._uvicorn = uvicorn.Server(config)
            target, kwargs = self._uvicorn.run, {"sockets": [self._sock]}
        else:
            assert handler is not None
            self._http = ThreadingHTTPServer(("127.0.0.1", port), handler)
            self._http.daemon_threads = True  # a held handler does not keep the test process alive
            self.port = int(self._http.server_address[1])
            target, kwargs = self._http.serve_forever, {"poll_interval": 0.05}
        self.base_url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=target, kwargs=kwargs, name=name, daemon=True)

    def start(self) -> Self:
        self._thread.start()
        if self._uvicorn is not None:
            server, thread = self._uvicorn, self._thread
            wait_for(lambda: server.started or not thread.is_alive(), START_DEADLINE_S, f"{self.name} to start")
            if not server.started:
                raise RuntimeError(f"{self.name} did not start")
        return self

    def stop(self) -> None:
        if self._uvicorn is not None:
            self._uvicorn.should_exit = True
            if self._thread.is_alive():
                self._thread.join(STOP_JOIN_S)
        if self._http is not None:
            if self._thread.is_alive():
                self._http.shutdown()
            self._http.server_close()
        if self._sock is not None:
            self._sock.close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
