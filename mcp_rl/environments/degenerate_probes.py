"""What degenerate replies score, before a run pays for them (the validator's probes).

GRPO climbs any slope its scorer offers. A scorer that pays a little for a reply that is not an
answer (reasoning-gym's substring scorers pay len(answer)/len(reply) to a long digit string; a
"first number in the reply" scorer reads the question's own numbers back) is learned instead of
the task, and an unbalanced answer set pays a constant. So the validator scores, over a sample of
held-out items (at most PROBE_ITEMS), each of:

    empty      ""
    digits     a long digit string, every digit in it (DIGITS)
    echo       the item's prompt (its last user message) given back as the reply
    constant   the most common reference answer, given to every item

(an MCP task file adds `all_answers`, every distinct expected answer in one reply, which a
"the reply contains the answer" reward pays in full: mcp_family/probes.py) and warns (each threshold stated in the warning) when a probe

    - earns a mean of more than MEAN_SHARE of the score range (any probe), or
    - earns some credit on more than CREDIT_SHARE of the items (empty, digits, echo, all_answers: a
      reply that is not an answer should earn nothing; the constant earns its share of the items by design).

A task (mcp_rl.task) is probed in validate_child with its own score(); an Atropos environment
(bundled, reasoning-gym, any with an evaluate()) in validate_atropos, by running its evaluate()
against ProbeServer, a loopback OpenAI-compatible server that answers every request with the
probe's reply. Stdlib only.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

PROBE_ITEMS = 32
DIGITS = ("1234567890" * 4)[:32]
MEAN_SHARE = 0.2
CREDIT_SHARE = 0.2
PROBES = ("empty", "digits", "echo", "constant")
ALL_ANSWERS = "all_answers"  # MCP task files only (their expected answers are all known up front)
NOT_ANSWERS = ("empty", "digits", "echo", ALL_ANSWERS)
DESCRIBED = {
    "empty": "an empty reply",
    "digits": f"a {len(DIGITS)}-digit string",
    "echo": "the prompt echoed back",
    "constant": "the most common reference answer given to every item",
    ALL_ANSWERS: "every distinct expected answer joined in one reply",
}
# What to do about a scorer that pays a reply that is not an answer (the warning's last words).
STRICTER_SCORE = (
    "Make score() stricter: full credit only for the exact answer, nothing for a reply that merely contains it or "
    "repeats the question."
)
# Fields of an Atropos sample that hold the item's reference answer (for the constant probe).
REFERENCE_KEYS = ("answer", "reference", "target", "gold", "expected", "solution", "label")


@dataclass
class ProbeResult:
    probe: str
    reply: str  # the reply (the echo: the first item's), cut for the report
    items: int | None  # items scored (None: the environment reported only an aggregate)
    mean: float  # mean score over the items
    credited: float | None  # share of items with more than the bottom of the score range

    def report(self) -> dict[str, Any]:
        return {
            "probe": self.probe,
            "reply": self.reply[:80],
            "items": self.items,
            "mean": round(self.mean, 4),
            "credited_share": None if self.credited is None else round(self.credited, 4),
        }


def reply_for(probe: str, prompt: str, constant: str | None) -> str:
    if probe == "empty":
        return ""
    if probe == "digits":
        return DIGITS
    if probe == "echo":
        return prompt
    return constant or ""


def most_common(references: Sequence[Any]) -> str | None:
    texts = [str(r).strip() for r in references if r is not None and str(r).strip()]
    if not texts:
        return None
    return Counter(texts).most_common(1)[0][0]


def result(probe: str, reply: str, scores: Sequence[float], low: float = 0.0) -> ProbeResult:
    n = len(scores)
    return ProbeResult(
        probe=probe,
        reply=reply,
        items=n,
        mean=sum(scores) / n if n else 0.0,
        credited=sum(1 for s in scores if s > low + 1e-9) / n if n else None,
    )


def warnings(
    results: Sequence[ProbeResult], low: float = 0.0, high: float = 1.0, advice: str = STRICTER_SCORE
) -> list[str]:
    """A warning per probe past a threshold, each saying the threshold and what to do (`advice`:
    how to make this kind of scorer refuse a reply that is not an answer)."""
    span = (high - low) or 1.0
    out: list[str] = []
    for r in results:
        share = (r.mean - low) / span
        what = DESCRIBED[r.probe]
        example = f" ({r.reply[:40]!r})" if r.probe != "empty" else ""
        if share > MEAN_SHARE:
            if r.probe == "constant":
                out.append(
                    f"Answering {r.reply[:40]!r} to every item (the most common reference answer) scores a mean "
                    f"{r.mean:.2f} over {r.items or 'the'} items, more than {MEAN_SHARE:.0%} of the score range: a "
                    "model that learns only that answer shows this much (the held-out verdict compares against it). "
                    "Balance the items' answers, or expect the figures to be read against this constant."
                )
            else:
                out.append(
                    f"{what.capitalize()}{example} scores a mean {r.mean:.2f} over {r.items or 'the'} items, more "
                    f"than {MEAN_SHARE:.0%} of the score range: a model can learn that reply instead of the task. "
                    + advice
                )
            continue
        if r.probe in NOT_ANSWERS and r.credited is not None and r.credited > CREDIT_SHARE:
            out.append(
                f"{what.capitalize()}{example} earns some credit on {r.credited:.0%} of {r.items} items (mean "
                f"{r.mean:.3f}; warned above {CREDIT_SHARE:.0%} of items): a scorer that pays anything for a reply "
                "that is not an answer gives training a slope towards it (e.g. len(answer)/len(reply) for a reply "
                "that contains the answer). Give 0 to replies that are not an answer."
            )
    return out


def last_user(messages: Sequence[dict[str, Any]]) -> str:
    for message in reversed(messages):
        if message.get("role") == "user" and isinstance(message.get("content"), str):
            return str(message["content"])
    return ""


class ProbeServer:
    """A loopback OpenAI-compatible server (chat and text completions) that answers every request
    with `reply(prompt)`: the prompt is the request's last user message (chat) or its text."""

    def __init__(self) -> None:
        self.reply: Callable[[str], str] = lambda prompt: ""
        self.requests = 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # quiet: the validator's output is its report
                return

            def _send(self, code: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                self._send(200, {"object": "list", "data": [{"id": "probe", "object": "model"}]})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                try:
                    body = json.loads(self.rfile.read(length) or b"{}")
                except json.JSONDecodeError:
                    self._send(400, {"error": {"message": "invalid JSON"}})
                    return
                server.requests += 1
                n = int(body.get("n") or 1)
                chat = self.path.rstrip("/").endswith("chat/completions")
                if chat:
                    prompt = last_user([m for m in body.get("messages") or [] if isinstance(m, dict)])
                else:
                    raw = body.get("prompt") or ""
                    prompt = "\n".join(map(str, raw)) if isinstance(raw, list) else str(raw)
                text = server.reply(prompt)
                words = len(text.split())
                if chat:
                    choices = [
                        {"index": i, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
                        for i in range(n)
                    ]
                else:
                    choices = [{"index": i, "text": text, "finish_reason": "stop", "logprobs": None} for i in range(n)]
                self._send(
                    200,
                    {
                        "id": "probe",
                        "object": "chat.completion" if chat else "text_completion",
                        "created": int(time.time()),
                        "model": body.get("model") or "probe",
                        "choices": choices,
                        "usage": {"prompt_tokens": 1, "completion_tokens": words * n, "total_tokens": 1 + words * n},
                    },
                )

        self._http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._http.daemon_threads = True
        self._thread = threading.Thread(target=self._http.serve_forever, name="probe-server", daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._http.server_address[1]}/v1"

    def __enter__(self) -> ProbeServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._http.shutdown()
        self._http.server_close()
        self._thread.join(timeout=5)
