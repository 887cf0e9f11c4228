"""FAKE Anthropic Messages API on 127.0.0.1 for driving Claude Code: a scripted model, not a model.

`POST /v1/messages` (streamed as Server-Sent Events when `stream` is true, else one JSON body) and
`/v1/messages/count_tokens`. The script, once a user message contains `trigger`: load `tool` with
Claude Code's ToolSearch (`select:<tool>`) if it is not among the request's tools yet, then call
it with `arguments`, once; every other turn answers a short text. Every request body is kept
(`bodies`), so a test can read what Claude Code handed the model (a tool result, a background
task's notification).

Use: `with FakeAnthropic(trigger="SMOKE", tool="mcp__rl__rl_test_inference", arguments={...}) as
fake:` and point `ANTHROPIC_BASE_URL` at `fake.base_url`.
"""

from __future__ import annotations

import json
import threading
import uuid
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.kit.loopback import LoopbackServer

Event = tuple[str, dict[str, Any]]


def _events(blocks: list[dict[str, Any]], stop: str) -> list[Event]:
    message = {
        "id": f"msg_{uuid.uuid4().hex[:12]}",
        "type": "message",
        "role": "assistant",
        "model": "claude-fake",
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 1},
    }
    events: list[Event] = [("message_start", {"type": "message_start", "message": message})]
    for i, block in enumerate(blocks):
        if block["type"] == "text":
            start = {"type": "text", "text": ""}
            delta = {"type": "text_delta", "text": block["text"]}
        else:
            start = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        events.append(("content_block_start", {"type": "content_block_start", "index": i, "content_block": start}))
        events.append(("content_block_delta", {"type": "content_block_delta", "index": i, "delta": delta}))
        events.append(("content_block_stop", {"type": "content_block_stop", "index": i}))
    events.append(
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop, "stop_sequence": None},
                "usage": {"output_tokens": 5},
            },
        )
    )
    events.append(("message_stop", {"type": "message_stop"}))
    return events


def _whole(events: list[Event]) -> dict[str, Any]:
    """The same answer as one JSON message (a request without `stream`)."""
    message = dict(events[0][1]["message"], content=[])
    for name, data in events:
        if name == "content_block_start":
            message["content"].append(dict(data["content_block"]))
        elif name == "content_block_delta" and data["delta"]["type"] == "text_delta":
            message["content"][-1]["text"] += data["delta"]["text"]
        elif name == "content_block_delta":
            message["content"][-1]["input"] = json.loads(data["delta"]["partial_json"])
        elif name == "message_delta":
            message["stop_reason"] = data["delta"]["stop_reason"]
    return message


class FakeAnthropic:
    def __init__(self, trigger: str, tool: str, arguments: dict[str, Any]) -> None:
        self.trigger, self.tool, self.arguments = trigger, tool, arguments
        self.bodies: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._server: LoopbackServer | None = None

    @property
    def base_url(self) -> str:
        assert self._server is not None, "not started"
        return self._server.base_url

    def answer(self, body: dict[str, Any]) -> list[Event]:
        with self._lock:
            self.bodies.append(body)
        tools = [t.get("name") for t in body.get("tools", [])]
        history = json.dumps(body.get("messages", []))
        if self.trigger in history and f'"name": "{self.tool}"' not in history:
            call_id = f"toolu_{uuid.uuid4().hex[:12]}"
            if self.tool in tools:
                return _events(
                    [{"type": "tool_use", "id": call_id, "name": self.tool, "input": self.arguments}], "tool_use"
                )
            if "ToolSearch" in tools and '"name": "ToolSearch"' not in history:
                query = {"query": f"select:{self.tool}"}
                return _events([{"type": "tool_use", "id": call_id, "name": "ToolSearch", "input": query}], "tool_use")
        return _events([{"type": "text", "text": "Noted."}], "end_turn")

    def __enter__(self) -> FakeAnthropic:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, status: int, content_type: str, data: bytes) -> None:
                self.send_response(status)
                self.send_header("content-type", content_type)
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                if "count_tokens" in self.path:
                    self._send(200, "application/json", json.dumps({"input_tokens": 10}).encode())
                    return
                events = fake.answer(body)
                if body.get("stream"):
                    data = "".join(f"event: {name}\ndata: {json.dumps(d)}\n\n" for name, d in events).encode()
                    self._send(200, "text/event-stream", data)
                else:
                    self._send(200, "application/json", json.dumps(_whole(events)).encode())

            def do_GET(self) -> None:
                self._send(200, "application/json", b"{}")

        self._server = LoopbackServer("fake-anthropic", handler=Handler).start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.stop()
