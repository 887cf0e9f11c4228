"""FAKE Tinker, W&B and OpenRouter key-check endpoints, for `mcp-rl doctor` tests.

A stand-in for the paid services, not the services: one real HTTP server on 127.0.0.1 that
answers the one authenticated call doctor makes to each, accepting only `good_key`:

    GET  /tinker/api/v1/auth/apikey/me   X-API-Key: <key>             (TINKER_BASE_URL=<base>/tinker)
    POST /wandb/graphql                  Authorization: Basic api:<key> (WANDB_BASE_URL=<base>/wandb)
    GET  /openrouter/key                 Authorization: Bearer <key>  (OPENROUTER_BASE_URL=<base>/openrouter)
"""

from __future__ import annotations

import base64
import json
from http.server import BaseHTTPRequestHandler

from tests.kit.loopback import LoopbackServer


class FakeServices:
    def __init__(self, good_key: str) -> None:
        self.good_key = good_key
        self.requests: list[tuple[str, str]] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:  # keep test output clean
                pass

            def _answer(self, status: int, body: dict) -> None:
                payload = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def do_GET(self) -> None:
                fake.requests.append(("GET", self.path))
                if self.path == "/tinker/api/v1/auth/apikey/me":
                    ok = self.headers.get("X-API-Key") == fake.good_key
                    self._answer(200, {"key_id": 1, "name": "ci", "note": "", "details": {}}) if ok else self._answer(
                        401, {"detail": "Invalid API key"}
                    )
                elif self.path == "/openrouter/key":
                    ok = self.headers.get("Authorization") == f"Bearer {fake.good_key}"
                    self._answer(200, {"data": {"label": "sk-or-...abc"}}) if ok else self._answer(
                        401, {"error": {"message": "No auth credentials found"}}
                    )
                else:
                    self._answer(404, {"error": "not found"})

            def do_POST(self) -> None:
                fake.requests.append(("POST", self.path))
                length = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(length)
                if self.path == "/wandb/graphql":
                    expected = "Basic " + base64.b64encode(f"api:{fake.good_key}".encode()).decode()
                    if self.headers.get("Authorization") == expected:
                        self._answer(200, {"data": {"viewer": {"username": "tester", "entity": "team"}}})
                    else:
                        self._answer(401, {"errors": [{"message": "user is not logged in"}]})
                else:
                    self._answer(404, {"error": "not found"})

        self._server = LoopbackServer("fake-services", handler=Handler)
        self.base_url = self._server.base_url

    def __enter__(self) -> FakeServices:
        self._server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.stop()
