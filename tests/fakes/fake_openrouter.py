"""FAKE OpenRouter: an OpenAI-compatible HTTP server on 127.0.0.1 for tests and the bench.

This is a stand-in for the paid OpenRouter API, not a model. It is a real HTTP server (the
child processes under test reach it over loopback with the real openai client) that speaks the
chat-completions and completions APIs (`n` choices, `logprobs` in the shapes the openai client
parses), answers with a scripted `responder`, records every request (path, model id,
Authorization header, body) and can be told to misbehave per model id:

    "malformed"  200 with a body that is not a completion (no `choices`)
    "fail"       HTTP 500 with an error body
    "hang"       never answers within the client's patience (sleeps `hang_s`)
    "empty"      well-formed completions with no content, cut at the token limit (a reasoning
                 model that spent max_tokens thinking)

Use in-process: `with FakeOpenRouter(behaviours={"bad/model": "malformed"}) as fake: fake.base_url`,
or standalone: `python tests/fakes/fake_openrouter.py --port 8123 --latency 0.5`.
"""

from __future__ import annotations

import argparse
import json
import re
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Responder = Callable[[str, str, int], str]
Behaviour = str  # "ok" | "malformed" | "fail" | "hang"

_EXPR = re.compile(r"(-?\d+)\s*([-+*x×])\s*(-?\d+)")


def arithmetic_responder(model: str, prompt: str, index: int) -> str:
    """Answers the last `a op b` in the prompt: right for even choice indices, off by one for odd.

    So a group of n choices has exactly ceil(n/2) right answers, and a scorer that really parses
    the answer must report that accuracy.
    """
    matches = _EXPR.findall(prompt)
    if not matches:
        return "I do not know."
    a, op, b = matches[-1]
    x, y = int(a), int(b)
    value = x + y if op == "+" else x - y if op == "-" else x * y
    if index % 2:
        value += 1
    return str(value)


@dataclass
class RecordedRequest:
    path: str
    model: str | None
    authorization: str | None
    body: dict[str, Any]
    time: float


@dataclass
class FakeOpenRouter:
    """The fake server. Thread-safe request log in `requests`."""

    behaviours: dict[str, Behaviour] = field(default_factory=dict)
    responder: Responder = arithmetic_responder
    latency_s: float = 0.0
    hang_s: float = 3600.0
    port: int = 0
    # Called with each request before answering (e.g. to look at the process table meanwhile).
    on_request: Callable[[RecordedRequest], None] | None = None
    requests: list[RecordedRequest] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _server: ThreadingHTTPServer | None = None
    _thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        assert self._server is not None, "not started"
        return f"http://127.0.0.1:{self._server.server_address[1]}/api/v1"

    def models_seen(self) -> set[str]:
        with self._lock:
            return {r.model for r in self.requests if r.model}

    def authorizations(self) -> set[str | None]:
        with self._lock:
            return {r.authorization for r in self.requests}

    def start(self) -> FakeOpenRouter:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # quiet
                pass

            def _send(self, status: int, payload: Any) -> None:
                data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                if self.path.rstrip("/").endswith("/models"):
                    self._send(200, {"data": [{"id": m} for m in fake.behaviours]})
                else:
                    self._send(404, {"error": {"message": "not found"}})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                try:
                    body = json.loads(self.rfile.read(length) or b"{}")
                except json.JSONDecodeError:
                    self._send(400, {"error": {"message": "bad json"}})
                    return
                record = RecordedRequest(
                    path=self.path,
                    model=body.get("model"),
                    authorization=self.headers.get("Authorization"),
                    body=body,
                    time=time.time(),
                )
                with fake._lock:
                    fake.requests.append(record)
                if fake.on_request is not None:
                    fake.on_request(record)
                behaviour = fake.behaviours.get(record.model or "", "ok")
                if fake.latency_s:
                    time.sleep(fake.latency_s)
                if behaviour == "fail":
                    self._send(500, {"error": {"message": f"fake provider error for {record.model}", "code": 500}})
                elif behaviour == "malformed":
                    self._send(200, {"id": "gen-broken", "object": "chat.completion", "unexpected": "no choices here"})
                elif behaviour == "hang":
                    time.sleep(fake.hang_s)
                    self._send(504, {"error": {"message": "timeout"}})
                elif self.path.rstrip("/").endswith("/chat/completions"):
                    self._send(200, fake.chat_completion(body, empty=behaviour == "empty"))
                elif self.path.rstrip("/").endswith("/completions"):
                    self._send(200, fake.completion(body))
                else:
                    self._send(404, {"error": {"message": f"unknown path {self.path}"}})

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="fake-openrouter", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def __enter__(self) -> FakeOpenRouter:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- response bodies -------------------------------------------------------------------
    def chat_completion(self, body: dict[str, Any], empty: bool = False) -> dict[str, Any]:
        model = body.get("model", "")
        messages = body.get("messages") or []
        prompt = "\n".join(str(m.get("content", "")) for m in messages if isinstance(m, dict))
        n = int(body.get("n") or 1)
        choices = []
        for i in range(n):
            text = "" if empty else self.responder(model, prompt, i)
            choice: dict[str, Any] = {
                "index": i,
                "message": {"role": "assistant", "content": text},
                "finish_reason": "length" if empty else "stop",
                "logprobs": None,
            }
            if body.get("logprobs"):
                choice["logprobs"] = {
                    "content": [
                        {"token": tok, "logprob": -0.1, "bytes": list(tok.encode()), "top_logprobs": []}
                        for tok in _tokens(text)
                    ]
                }
            choices.append(choice)
        return {
            "id": f"gen-{uuid.uuid4().hex[:12]}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "provider": "FakeOpenRouter",
            "choices": choices,
            "usage": _usage(prompt, choices, lambda c: c["message"]["content"]),
        }

    def completion(self, body: dict[str, Any]) -> dict[str, Any]:
        model = body.get("model", "")
        prompt = body.get("prompt") or ""
        if isinstance(prompt, list):
            prompt = "\n".join(map(str, prompt))
        n = int(body.get("n") or 1)
        choices = []
        for i in range(n):
            text = self.responder(model, str(prompt), i)
            choice: dict[str, Any] = {"index": i, "text": text, "finish_reason": "stop", "logprobs": None}
            if body.get("logprobs") is not None:
                toks = _tokens(text)
                offsets, pos = [], 0
                for tok in toks:
                    offsets.append(pos)
                    pos += len(tok)
                choice["logprobs"] = {
                    "tokens": toks,
                    "token_logprobs": [-0.1] * len(toks),
                    "top_logprobs": None,
                    "text_offset": offsets,
                }
            choices.append(choice)
        return {
            "id": f"cmpl-{uuid.uuid4().hex[:12]}",
            "object": "text_completion",
            "created": int(time.time()),
            "model": model,
            "choices": choices,
            "usage": _usage(str(prompt), choices, lambda c: c["text"]),
        }


def _tokens(text: str) -> list[str]:
    return re.findall(r"\s*\S+", text) or [text]


def _usage(prompt: str, choices: list[dict[str, Any]], text_of: Callable[[dict[str, Any]], str]) -> dict[str, int]:
    prompt_tokens = len(_tokens(prompt))
    completion_tokens = sum(len(_tokens(text_of(c))) for c in choices)
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens, "total_tokens": prompt_tokens + completion_tokens}


def main() -> None:
    parser = argparse.ArgumentParser(description="FAKE OpenRouter (OpenAI-compatible) server for tests")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--latency", type=float, default=0.0, help="seconds added to every answer")
    parser.add_argument("--behave", action="append", default=[], metavar="MODEL=BEHAVIOUR")
    args = parser.parse_args()
    behaviours = dict(item.split("=", 1) for item in args.behave)
    fake = FakeOpenRouter(behaviours=behaviours, latency_s=args.latency, port=args.port).start()
    print(fake.base_url, flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    main()
