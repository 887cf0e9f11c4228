"""FAKE OpenRouter: an HTTP server on 127.0.0.1 that behaves the way OpenRouter documents.

A stand-in for the paid API, not a model. Children under test reach it over loopback with the
real openai client. What it does, as OpenRouter does (reference/services.md):
- `POST /api/v1/chat/completions` and `/completions`; `n` is IGNORED (one choice per request,
  unless `honour_n=True`), answers come from a scripted `responder`.
- `usage` in every answer: token counts, `completion_tokens_details.reasoning_tokens`, and `cost`
  (USD; the tokens at the listed price x `reported_cost_factor`) when the request asks for usage
  accounting (`"usage": {"include": true}`).
- Errors are JSON bodies `{"error": {"message", "code"}}`: 401 for a key other than `api_key`
  (when set), 400 "... is not a valid model ID" for an id outside `catalog`, and per behaviour
  402 / 429 with `Retry-After` / 500.
- Chat requests with `tools` get `tool_calls` from `tool_responder` when one is given.
- `GET /api/v1/models` lists `catalog`; `GET /api/v1/key` answers 200 for the right key, else 401.

Behaviours per model id:
    "ok"          answers (the default)
    "reasoning"   a reasoning model: spends REASONING_TOKENS[effort] tokens on reasoning first;
                  if max_tokens leaves nothing for the answer, `content` is "" with `reasoning`
                  filled and finish_reason "length". `reasoning: {enabled: false}` turns it off;
                  `{exclude: true}` only leaves the reasoning text out of the answer.
    "mandatory"   like "reasoning", but `{enabled: false}` is refused with a 400
    "silent"      never answers: always "" cut at the limit, whatever the options (a misbehaving model)
    "sometimes"   every third answer of the model is "" cut at the limit, whatever the options
    "malformed"   200 with a body that is not a completion (no `choices`)
    "fail"        HTTP 500 with an error body
    "nocredits"   HTTP 402 "Insufficient credits"
    "ratelimited" HTTP 429 with Retry-After for the first `rate_limited_requests` requests
    "hang"        does not answer within the client's patience (sleeps `hang_s`)

Use in-process: `with FakeOpenRouter(behaviours={"bad/model": "malformed"}) as fake: fake.base_url`,
or standalone: `python -m tests.fakes.fake_openrouter --port 8123 --latency 0.5`.
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
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.kit.loopback import LoopbackServer

Responder = Callable[[str, str, int], str]
Behaviour = str

_EXPR = re.compile(r"(-?\d+)\s*([-+*x×])\s*(-?\d+)")
REASONING_TOKENS = {"minimal": 20, "low": 60, "medium": 200, "high": 600}
PRICE_PER_TOKEN_USD = 1e-6
# Ids the fake knows besides the behaviours' keys: the shipped defaults and the tests' own.
FAKE_CATALOG = (
    "qwen/qwen3-8b",
    "z-ai/glm-4.7-flash",
    "minimax/minimax-m2.7",
    "openai/gpt-4o-mini",
    "fake/good-model",
    "fake/small-model",
    "fake/medium-model",
    "fake/large-model",
)


def arithmetic_responder(model: str, prompt: str, index: int) -> str:
    """Answers the last `a op b` in the prompt: right for even indices, off by one for odd.

    With `n` ignored every request is index 0, so the fake counts requests per model instead:
    the k-th answer of a model is right when k is even. A group of n answers then has
    ceil(n/2) right ones, and a scorer that really parses the answer must report that.
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


def _error(status: int, message: str) -> dict[str, Any]:
    return {"error": {"message": message, "code": status}}


@dataclass
class FakeOpenRouter:
    """The fake server. Thread-safe request log in `requests`."""

    behaviours: dict[str, Behaviour] = field(default_factory=dict)
    responder: Responder = arithmetic_responder
    latency_s: float = 0.0
    hang_s: float = 3600.0
    port: int = 0
    api_key: str | None = None  # when set, any other bearer token gets a 401
    catalog: list[str] | None = None  # default: FAKE_CATALOG + the behaviours' ids
    honour_n: bool = False
    key_limit_remaining: float | None = None  # GET /key: the key's credit left (None: no limit)
    rate_limited_requests: int = 2
    # `usage.cost` is the tokens at the listed price times this (what the provider bills may differ
    # from the list price: a test can tell the reported cost from one computed from the price).
    reported_cost_factor: float = 1.0
    retry_after_s: float = 1.0
    # Chat requests that offer `tools`: (model, body, index) -> {"content", "tool_calls"} (the
    # OpenAI format); None: such requests are answered by `responder` like any other.
    tool_responder: Callable[[str, dict[str, Any], int], dict[str, Any]] | None = None
    # Called with each request before answering (e.g. to look at the process table meanwhile).
    on_request: Callable[[RecordedRequest], None] | None = None
    requests: list[RecordedRequest] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _answered: dict[str, int] = field(default_factory=dict)
    _server: LoopbackServer | None = None

    @property
    def base_url(self) -> str:
        assert self._server is not None, "not started"
        return f"{self._server.base_url}/api/v1"

    def known_ids(self) -> list[str]:
        if self.catalog is not None:
            return list(self.catalog)
        return sorted(set(FAKE_CATALOG) | set(self.behaviours))

    def models_seen(self) -> set[str]:
        with self._lock:
            return {r.model for r in self.requests if r.model}

    def authorizations(self) -> set[str | None]:
        with self._lock:
            return {r.authorization for r in self.requests}

    def completions_for(self, model: str) -> list[RecordedRequest]:
        with self._lock:
            return [r for r in self.requests if r.model == model and r.path.endswith("completions")]

    def start(self) -> FakeOpenRouter:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # quiet
                pass

            def _send(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
                data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

            def _key_ok(self) -> bool:
                return fake.api_key is None or self.headers.get("Authorization") == f"Bearer {fake.api_key}"

            def do_GET(self) -> None:
                path = self.path.rstrip("/")
                if path.endswith("/models"):
                    # OpenRouter's pricing: USD per token, as strings.
                    price = {"prompt": str(PRICE_PER_TOKEN_USD), "completion": str(PRICE_PER_TOKEN_USD)}
                    self._send(200, {"data": [{"id": m, "name": m, "pricing": price} for m in fake.known_ids()]})
                elif path.endswith("/key"):
                    if self._key_ok() and self.headers.get("Authorization"):
                        limit = None if fake.key_limit_remaining is None else 1.0
                        self._send(
                            200,
                            {
                                "data": {
                                    "label": "fake",
                                    "usage": 0,
                                    "limit": limit,
                                    "limit_remaining": fake.key_limit_remaining,
                                    "is_free_tier": False,
                                }
                            },
                        )
                    else:
                        self._send(401, _error(401, "User not found."))
                else:
                    self._send(404, _error(404, "Not Found"))

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                try:
                    body = json.loads(self.rfile.read(length) or b"{}")
                except json.JSONDecodeError:
                    self._send(400, _error(400, "Invalid JSON"))
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
                    seen = sum(1 for r in fake.requests if r.model == record.model)
                if fake.on_request is not None:
                    fake.on_request(record)
                model = record.model or ""
                behaviour = fake.behaviours.get(model, "ok")
                if fake.latency_s:
                    time.sleep(fake.latency_s)
                reasoning = body.get("reasoning") if isinstance(body.get("reasoning"), dict) else {}
                if not self._key_ok():
                    self._send(401, _error(401, "User not found."))
                elif model not in fake.known_ids():
                    self._send(400, _error(400, f"{model} is not a valid model ID"))
                elif behaviour == "fail":
                    self._send(500, _error(500, f"Internal Server Error (fake provider error for {model})"))
                elif behaviour == "nocredits":
                    self._send(
                        402, _error(402, "Insufficient credits. Add more using https://openrouter.ai/settings/credits")
                    )
                elif behaviour == "ratelimited" and seen <= fake.rate_limited_requests:
                    self._send(
                        429,
                        _error(429, "Rate limit exceeded: free-models-per-min."),
                        {"Retry-After": f"{fake.retry_after_s:g}"},
                    )
                elif behaviour == "mandatory" and reasoning.get("enabled") is False:
                    self._send(400, _error(400, "Reasoning is mandatory for this endpoint and cannot be disabled."))
                elif behaviour == "malformed":
                    self._send(200, {"id": "gen-broken", "object": "chat.completion", "unexpected": "no choices here"})
                elif behaviour == "hang":
                    time.sleep(fake.hang_s)
                    self._send(504, _error(504, "timeout"))
                elif self.path.rstrip("/").endswith("/chat/completions"):
                    self._send(200, fake.chat_completion(body, behaviour))
                elif self.path.rstrip("/").endswith("/completions"):
                    self._send(200, fake.completion(body))
                else:
                    self._send(404, _error(404, f"unknown path {self.path}"))

        self._server = LoopbackServer("fake-openrouter", handler=Handler, port=self.port).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()

    def __enter__(self) -> FakeOpenRouter:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- response bodies -------------------------------------------------------------------
    def _next_index(self, model: str) -> int:
        with self._lock:
            index = self._answered.get(model, 0)
            self._answered[model] = index + 1
        return index

    def chat_completion(self, body: dict[str, Any], behaviour: Behaviour = "ok") -> dict[str, Any]:
        model = body.get("model", "")
        messages = body.get("messages") or []
        prompt = "\n".join(str(m.get("content", "")) for m in messages if isinstance(m, dict))
        options = body.get("reasoning") if isinstance(body.get("reasoning"), dict) else {}
        max_tokens = body.get("max_tokens") or body.get("max_completion_tokens") or 100_000
        reasons = behaviour == "silent" or (
            behaviour in ("reasoning", "mandatory") and options.get("enabled") is not False
        )
        think = REASONING_TOKENS.get(str(options.get("effort", "medium")), 200) if reasons else 0
        n = int(body.get("n") or 1) if self.honour_n else 1
        choices, completion_tokens, reasoning_tokens = [], 0, 0
        for i in range(n):
            index = self._next_index(model) if n == 1 else i
            text = self.responder(model, prompt, index)
            cut = behaviour == "silent" or (behaviour == "sometimes" and index % 3 == 2)
            if cut or think + len(_tokens(text)) > max_tokens:
                spent = max_tokens if cut else min(max_tokens, think)
                content, finish = "", "length"
            else:
                spent, content, finish = think, text, "stop"
            message: dict[str, Any] = {"role": "assistant", "content": content}
            if reasons and not options.get("exclude"):
                message["reasoning"] = "Let me work this out step by step. " * max(1, spent // 8)
            choice: dict[str, Any] = {"index": i, "message": message, "finish_reason": finish, "logprobs": None}
            if body.get("logprobs"):
                choice["logprobs"] = {
                    "content": [
                        {"token": tok, "logprob": -0.1, "bytes": list(tok.encode()), "top_logprobs": []}
                        for tok in _tokens(content)
                    ]
                }
            if self.tool_responder is not None and body.get("tools"):
                # The OpenAI tools API: the scripted reply may call the offered tools.
                reply = self.tool_responder(model, body, index)
                calls = reply.get("tool_calls") or []
                message.update(content=reply.get("content") or "", tool_calls=calls or None)
                choice["finish_reason"] = "tool_calls" if calls else "stop"
                content = (reply.get("content") or "") + json.dumps(calls)
            choices.append(choice)
            reasoning_tokens += spent
            completion_tokens += spent + (len(_tokens(content)) if content else 0)
        return {
            "id": f"gen-{uuid.uuid4().hex[:12]}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "provider": "FakeOpenRouter",
            "choices": choices,
            "usage": self._usage(body, len(_tokens(prompt)), completion_tokens, reasoning_tokens),
        }

    def completion(self, body: dict[str, Any]) -> dict[str, Any]:
        model = body.get("model", "")
        prompt = body.get("prompt") or ""
        if isinstance(prompt, list):
            prompt = "\n".join(map(str, prompt))
        n = int(body.get("n") or 1) if self.honour_n else 1
        choices = []
        for i in range(n):
            text = self.responder(model, str(prompt), self._next_index(model) if n == 1 else i)
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
        completion_tokens = sum(len(_tokens(c["text"])) for c in choices)
        return {
            "id": f"cmpl-{uuid.uuid4().hex[:12]}",
            "object": "text_completion",
            "created": int(time.time()),
            "model": model,
            "choices": choices,
            "usage": self._usage(body, len(_tokens(str(prompt))), completion_tokens, 0),
        }

    def _usage(
        self, body: dict[str, Any], prompt_tokens: int, completion_tokens: int, reasoning_tokens: int
    ) -> dict[str, Any]:
        usage: dict[str, Any] = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "completion_tokens_details": {"reasoning_tokens": reasoning_tokens},
        }
        asked = body.get("usage")
        if isinstance(asked, dict) and asked.get("include"):
            usage["cost"] = round(
                (prompt_tokens + completion_tokens) * PRICE_PER_TOKEN_USD * self.reported_cost_factor, 8
            )
        return usage


def _tokens(text: str) -> list[str]:
    return re.findall(r"\s*\S+", text) or ([text] if text else [])


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
