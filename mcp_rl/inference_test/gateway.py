"""The test's gateway: a loopback HTTP server between the Atropos children and the providers.

Why a gateway and not Atropos's own options (atroposlib 0.4, `envs/server_handling/`):
- Atropos retries every completion 3 x 3 times (tenacity, <= 10 s waits) on top of the openai
  client's own 2 retries, and `process` mode retries a rejected group with the next item with no
  pause and no limit. With a provider that answers uselessly (a reasoning model cut at
  max_tokens=8 returns empty content) that is thousands of paid calls. Nothing in
  `APIServerConfig` caps requests or tokens; only a process that sees every request can.
- `APIServerConfig` has no `extra_body`; the `reasoning` object can only come from the
  environment's own `thinking_mode`/`reasoning_effort` fields, which a smoke test must not edit.
- Provider errors end up as an exit code after nine retries; here they are read once, in the
  provider's words, and turned into one line with the fix.
- The real OpenRouter key stays in the worker's memory: a child gets only this test's gateway
  token, which is worthless off this machine and after the test.

Each model has a `Lane`: its upstream, its options (`reasoning`, the max_tokens floor), its
budgets and its usage. A lane that must stop (budget spent, a fatal provider answer, nothing but
empty answers, repeated transient failures) records why in `stop`; the worker polls that and ends
the model's process, and every further request is refused here without reaching the provider.
"""

from __future__ import annotations

import difflib
import email.utils
import json
import logging
import random
import secrets
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal

import httpx

from mcp_rl.inference_test.models import ModelUsage
from mcp_rl.model_specs import ModelSpec

log = logging.getLogger("mcp_rl.inference_test.gateway")

# One incoming request tries the provider at most this often (429, 5xx, lost connection).
MAX_ATTEMPTS = 3
# Rounds of transient failures in a row (requests in flight together count once) before a model
# is stopped: with the backoff below that is ~15 s of trying.
MAX_FAILURE_ROUNDS = 5
BACKOFF_BASE_S = 1.0
BACKOFF_CAP_S = 20.0
# Retry-After beyond this is not waited for: the model stops with the provider's reason.
RETRY_AFTER_CAP_S = 60.0
CONNECT_TIMEOUT_S = 10.0
PREFLIGHT_TIMEOUT_S = 15.0
# A request that sets no max_tokens gets the tokens left as its limit once fewer than this remain.
UNCAPPED_BELOW = 8192
_TRANSIENT = {408, 409, 425, 429, 500, 502, 503, 504, 520, 522, 524, 529}

# Token-in generation (verifiers' TrainClient posts token ids to /inference/v1/generate): the
# local model server and a run checkpoint's serve it; OpenRouter takes chat requests only.
TOKEN_IN_PREFIX = "/inference/"
TOKEN_IN_REMOTE = (
    "mcp-rl test gateway: token-in generation (/inference/v1/generate) is served by the local model and "
    "run checkpoints only; OpenRouter models take chat requests"
)

StopState = Literal["failed", "over_budget"]


@dataclass(frozen=True)
class Stop:
    state: StopState
    reason: str


def _provider_name(remote: bool) -> str:
    return "OpenRouter" if remote else "the local model server"


def closest_ids(model_id: str, known: list[str], n: int = 3) -> list[str]:
    """Known ids that look like `model_id` (full id, then the part after the vendor)."""
    close = difflib.get_close_matches(model_id, known, n=n, cutoff=0.6)
    if len(close) < n:
        short = {k.split("/", 1)[-1]: k for k in known}
        for match in difflib.get_close_matches(model_id.split("/", 1)[-1], list(short), n=n, cutoff=0.6):
            if short[match] not in close:
                close.append(short[match])
    return close[:n]


def unknown_model_line(model_id: str, known: list[str], detail: str = "") -> str:
    close = closest_ids(model_id, known) if known else []
    hint = f" Closest ids: {', '.join(close)}." if close else ""
    detail = f" ({detail})" if detail else ""
    return (
        f"Unknown model id '{model_id}'{detail}: OpenRouter does not list it.{hint} "
        "Fix: use an id from https://openrouter.ai/models in models=[...]."
    )


def error_message(body: bytes) -> str:
    """The provider's own message from a JSON error body (OpenRouter/OpenAI shape), shortened."""
    try:
        data = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return body[:200].decode("utf-8", errors="replace").strip()
    error = data.get("error") if isinstance(data, dict) else None
    if isinstance(error, dict):
        message = str(error.get("message") or "")
        raw = (error.get("metadata") or {}).get("raw") if isinstance(error.get("metadata"), dict) else None
        if raw and str(raw) not in message:
            message = f"{message}: {raw}"
        return message[:300]
    if isinstance(error, str):
        return error[:300]
    return json.dumps(data)[:200]


def cause_line(
    status: int, message: str, model: ModelSpec, reasoning_sent: bool, known: list[str] | None = None
) -> tuple[str, bool]:
    """(one line with the cause and the fix, whether the model must stop now) for an HTTP error."""
    remote = model.provider == "openrouter"
    who = _provider_name(remote)
    said = f"{status}: {message}" if message else str(status)
    lowered = message.lower()
    if status == 401:
        return (
            f"{who} refused the key ({said}). Fix: set OPENROUTER_API_KEY to a valid key "
            "(https://openrouter.ai/keys) in the MCP server's environment and restart it.",
            True,
        )
    if status == 402:
        return (
            f"No credits left on the OpenRouter account ({said}). Fix: add credits at "
            "https://openrouter.ai/settings/credits, or test a ':free' model or models=['local'].",
            True,
        )
    if status in (400, 404) and reasoning_sent and "reasoning" in lowered:
        return (
            f"{model.id} refused the reasoning options {json.dumps(model.reasoning)} ({said}). Fix: change "
            f"`reasoning` of {model.id} in configs/test_models.yaml (e.g. {{effort: low}}, or remove it).",
            True,
        )
    if status == 404 or (status == 400 and "model" in lowered):
        return unknown_model_line(model.id, known or [], said), True
    if status == 400:
        return f"{who} rejected the request ({said}). Fix: see the request the environment makes in the log.", True
    if status == 403:
        return (
            f"{who} refused the request ({said}); often moderation or the key's spending limit. "
            "Fix: check the key's limits at https://openrouter.ai/keys or pick another model.",
            True,
        )
    if status == 429:
        return (
            f"Rate limited by {who} ({said}), still after backing off. Fix: wait and retry, test fewer "
            "models at once, or use a paid model (free models have low limits).",
            False,
        )
    if status >= 500 or status in _TRANSIENT:
        return f"{who} or the model's provider failed ({said}). Fix: retry later or pick another model.", False
    return f"{who} answered HTTP {said}. Fix: see the model's log.", True


def connection_line(base_url: str, exc: BaseException, remote: bool) -> str:
    if remote:
        return (
            f"Cannot reach OpenRouter at {base_url} ({type(exc).__name__}: {exc}). Fix: check this "
            "machine's network or proxy settings, or OPENROUTER_BASE_URL."
        )
    return f"Cannot reach the local model server at {base_url} ({type(exc).__name__}: {exc})."


def _retry_after(headers: httpx.Headers) -> float | None:
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _is_empty(choice: dict[str, Any]) -> bool:
    """A completion with no content that was cut at the token limit (a token-in answer carries
    its tokens, not text: it is empty only without them)."""
    if "token_ids" in choice:
        return not choice["token_ids"] and choice.get("finish_reason") == "length"
    message = choice.get("message")
    text = message.get("content") if isinstance(message, dict) else choice.get("text")
    return not (text or "").strip() and choice.get("finish_reason") == "length"


@dataclass
class Budgets:
    requests: int
    tokens: int


class Lane:
    """One model's way to its provider: options, budgets, backoff, usage and why it stopped."""

    def __init__(
        self,
        model: ModelSpec,
        upstream: str,
        api_key: str | None,
        budgets: Budgets,
        *,
        empty_limit: int,
        request_timeout_s: float,
        known_ids: list[str] | None = None,
        backoff_base_s: float = BACKOFF_BASE_S,
        client: httpx.Client | None = None,
    ) -> None:
        self.model = model
        self.remote = model.provider == "openrouter"
        self.upstream = upstream.rstrip("/")
        self._api_key = api_key
        self.budgets = budgets
        self.empty_limit = max(1, empty_limit)
        self.known_ids = known_ids or []
        self.backoff_base_s = backoff_base_s
        self._client = client or httpx.Client(timeout=httpx.Timeout(request_timeout_s, connect=CONNECT_TIMEOUT_S))
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self.usage = ModelUsage(request_budget=budgets.requests, token_budget=budgets.tokens)
        self.stop: Stop | None = None
        self.last_max_tokens: int | None = None
        # Backoff gate: no request leaves before `_not_before`; failures of requests sent
        # together raise `_rounds` once.
        self._not_before = 0.0
        self._gate_opened = 0.0
        self._rounds = 0

    # -- state read by the worker ------------------------------------------------------------
    def snapshot(self) -> ModelUsage:
        with self._lock:
            return self.usage.model_copy(deep=True)

    def close(self, reason: str = "the model was stopped") -> None:
        """No more requests (the model ended); in-flight ones finish on their own."""
        with self._lock:
            if self.stop is None:
                self.stop = Stop("failed", reason)
        self._closed.set()

    def close_client(self) -> None:
        """Release the lane's connections (the gateway has stopped; late requests just fail)."""
        self._client.close()

    def _stop(self, state: StopState, reason: str) -> None:
        # Lock held by the caller.
        if self.stop is None:
            self.stop = Stop(state, reason)
            log.info("model %s stops: %s", self.model.id, reason)

    # -- the request path --------------------------------------------------------------------
    def _prepare(self, body: dict[str, Any]) -> dict[str, Any]:
        body = dict(body)
        if self.remote:
            if self.model.reasoning and "reasoning" not in body:
                body["reasoning"] = dict(self.model.reasoning)
            # OpenRouter usage accounting: the response's `usage` then carries `cost`.
            body["usage"] = {"include": True}
        key = "max_completion_tokens" if "max_completion_tokens" in body else "max_tokens"
        asked = body.get(key)
        floor = self.model.min_max_tokens or 0
        if isinstance(asked, int) and asked < floor:
            body[key] = floor
        return body

    def _refusal(self, reason: str) -> tuple[int, bytes]:
        self.usage.refused += 1
        payload = {"error": {"message": f"mcp-rl test gateway: {reason}", "code": 402, "type": "mcp_rl_stopped"}}
        return 402, json.dumps(payload).encode()

    def _admit(self, body: dict[str, Any], retry: bool) -> tuple[int, bytes] | None:
        """Count one request against the budgets (lock held); a refusal if it may not go out."""
        if self.stop is not None:
            return self._refusal(self.stop.reason)
        used = self.usage
        if used.requests >= self.budgets.requests or used.total_tokens >= self.budgets.tokens:
            which = "request" if used.requests >= self.budgets.requests else "token"
            self._stop(
                "over_budget",
                f"stopped at its {which} budget: {used.requests}/{self.budgets.requests} requests, "
                f"{used.total_tokens}/{self.budgets.tokens} tokens",
            )
            return self._refusal(self.stop.reason if self.stop else "budget spent")
        # Never ask for more completion tokens than the budget has left (a request without a
        # limit gets one only near the end: providers reject limits beyond a model's context).
        left = self.budgets.tokens - used.total_tokens
        key = "max_completion_tokens" if "max_completion_tokens" in body else "max_tokens"
        asked = body.get(key)
        if (isinstance(asked, int) and asked > left) or (not isinstance(asked, int) and left < UNCAPPED_BELOW):
            body[key] = left
        self.last_max_tokens = body.get(key)
        used.requests += 1
        if retry:
            used.retries += 1
        return None

    def _wait_gate(self) -> None:
        while True:
            with self._lock:
                delay = self._not_before - time.monotonic()
            if delay <= 0 or self._closed.wait(delay):
                return

    def _failure(self, sent_at: float, delay: float) -> None:
        """A transient failure (lock held): back off; a new round of failures counts."""
        if sent_at >= self._gate_opened:
            self._rounds += 1
        pause = min(BACKOFF_CAP_S, self.backoff_base_s * 2 ** (self._rounds - 1)) * random.uniform(0.5, 1.0)
        pause = max(pause, delay)
        until = time.monotonic() + pause
        if until > self._not_before:
            self._not_before = until
            self._gate_opened = until

    def _account(self, data: dict[str, Any]) -> None:
        """Usage and answer counts of a 200 response (lock held)."""
        used = self.usage
        raw_usage = data.get("usage")
        usage: dict[str, Any] = raw_usage if isinstance(raw_usage, dict) else {}
        choices = [c for c in data.get("choices") or [] if isinstance(c, dict)]
        prompt = int(usage.get("prompt_tokens") or 0)
        completion = int(usage.get("completion_tokens") or 0)
        if not usage:  # a token-in answer has no usage: its tokens are its count
            completion = sum(len(c.get("token_ids") or []) for c in choices)
        used.prompt_tokens += prompt
        used.completion_tokens += completion
        used.total_tokens += int(usage.get("total_tokens") or prompt + completion)
        details = usage.get("completion_tokens_details")
        if isinstance(details, dict):
            used.reasoning_tokens += int(details.get("reasoning_tokens") or 0)
        cost = usage.get("cost")
        if isinstance(cost, (int, float)):
            used.cost_usd = round((used.cost_usd or 0.0) + float(cost), 8)
        empty = sum(1 for c in choices if _is_empty(c))
        used.empty_answers += empty
        used.answers += len(choices) - empty
        if used.answers == 0 and used.empty_answers >= self.empty_limit:
            self._stop("failed", self.empty_line())

    def empty_line(self) -> str:
        used = self.usage
        if not self.remote:
            return (
                f"every answer was empty ({used.empty_answers} cut at max_tokens={self.last_max_tokens}). "
                "Fix: raise the environment's answer token limit."
            )
        return (
            f"every answer was empty: {self.model.id} spent max_tokens={self.last_max_tokens} on reasoning "
            f"(finish_reason=length, {used.empty_answers} answers). Fix: in configs/test_models.yaml set "
            f"`reasoning: {{enabled: false}}` for {self.model.id} if it allows that, or raise its `min_max_tokens`."
        )

    def forward(self, suffix: str, raw: bytes) -> tuple[int, bytes]:
        """Send one child request upstream under the lane's rules; (status, body) for the child."""
        try:
            body = self._prepare(json.loads(raw or b"{}"))
        except (json.JSONDecodeError, AttributeError, TypeError):
            return 400, b'{"error": {"message": "mcp-rl test gateway: the request body is not a JSON object"}}'
        url = self.upstream + suffix
        if suffix.startswith(TOKEN_IN_PREFIX):
            if self.remote:
                return 400, json.dumps({"error": {"message": TOKEN_IN_REMOTE}}).encode()
            # vLLM's token-in routes sit at the server's root, not under its /v1.
            url = self.upstream.removesuffix("/v1") + suffix
        headers = {"Content-Type": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        for attempt in range(MAX_ATTEMPTS):
            self._wait_gate()
            with self._lock:
                refusal = self._admit(body, retry=attempt > 0)
            if refusal is not None:
                return refusal
            sent_at = time.monotonic()
            try:
                response = self._client.post(url, content=json.dumps(body).encode(), headers=headers)
            except httpx.TransportError as exc:
                line = connection_line(self.upstream, exc, self.remote)
                with self._lock:
                    self.usage.errors["connection"] = self.usage.errors.get("connection", 0) + 1
                    self.usage.last_error = f"{type(exc).__name__}: {exc}"
                    self._failure(sent_at, 0.0)
                    if self._rounds >= MAX_FAILURE_ROUNDS:
                        self._stop("failed", line)
                if attempt + 1 < MAX_ATTEMPTS:
                    continue
                return 502, json.dumps({"error": {"message": line}}).encode()
            status, content = response.status_code, response.content
            if status == 200:
                try:
                    data = json.loads(content)
                except json.JSONDecodeError:
                    data = None
                with self._lock:
                    if isinstance(data, dict) and isinstance(data.get("choices"), list) and data["choices"]:
                        self._rounds = 0
                        self._account(data)
                    else:
                        # 200 without a completion: the child will fail on it; repeated, it stops.
                        self.usage.errors["200-without-choices"] = self.usage.errors.get("200-without-choices", 0) + 1
                        self.usage.last_error = f"200 without choices: {content[:200].decode('utf-8', 'replace')}"
                        self._failure(sent_at, 0.0)
                        if self._rounds >= MAX_FAILURE_ROUNDS:
                            self._stop(
                                "failed",
                                f"{_provider_name(self.remote)} answered {self.usage.errors['200-without-choices']} times "
                                "without any completion (no `choices` in the body). Fix: retry later or pick another model.",
                            )
                return status, content
            message = error_message(content)
            line, fatal = cause_line(status, message, self.model, "reasoning" in body, self.known_ids)
            retry_after = _retry_after(response.headers)
            with self._lock:
                self.usage.errors[str(status)] = self.usage.errors.get(str(status), 0) + 1
                self.usage.last_error = f"{status}: {message}"
                if fatal:
                    self._stop("failed", line)
                else:
                    if retry_after is not None and retry_after > RETRY_AFTER_CAP_S:
                        self._stop("failed", f"{line} (the provider asked to wait {retry_after:.0f} s)")
                    self._failure(sent_at, retry_after or 0.0)
                    if self._rounds >= MAX_FAILURE_ROUNDS:
                        self._stop("failed", f"{line} ({self._rounds} rounds of retries)")
            if fatal or self.stop is not None or attempt + 1 == MAX_ATTEMPTS:
                return status, content
        raise AssertionError("unreachable")


class Gateway:
    """The loopback server. Children use `base_url(slug)` with `token` as their API key."""

    def __init__(self) -> None:
        self.token = secrets.token_urlsafe(24)
        self.lanes: dict[str, Lane] = {}
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def add(self, lane: Lane) -> None:
        self.lanes[lane.model.slug] = lane

    def base_url(self, slug: str) -> str:
        assert self._server is not None, "not started"
        return f"http://127.0.0.1:{self._server.server_address[1]}/m/{slug}"

    def start(self) -> Gateway:
        gateway = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # the worker logs what matters
                pass

            def _send(self, status: int, data: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if not secrets.compare_digest(self.headers.get("Authorization") or "", f"Bearer {gateway.token}"):
                    self._send(401, b'{"error": {"message": "mcp-rl test gateway: wrong token"}}')
                    return
                parts = self.path.split("/", 3)  # "", "m", slug, rest
                lane = gateway.lanes.get(parts[2]) if len(parts) == 4 and parts[1] == "m" else None
                if lane is None:
                    self._send(404, b'{"error": {"message": "mcp-rl test gateway: unknown model path"}}')
                    return
                try:
                    status, data = lane.forward("/" + parts[3], raw)
                except Exception as exc:
                    log.exception("gateway error")
                    status, data = 500, json.dumps({"error": {"message": f"mcp-rl test gateway: {exc!r}"}}).encode()
                self._send(status, data)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, name="test-gateway", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        for lane in self.lanes.values():
            lane.close("the test ended")
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        for lane in self.lanes.values():
            lane.close_client()


# --- before any paid call ----------------------------------------------------------------------
@dataclass
class Preflight:
    """What the provider said before the test spent anything: causes per model id, known ids."""

    causes: dict[str, str]
    known_ids: list[str]


def preflight(
    base_url: str, api_key: str | None, model_ids: list[str], client: httpx.Client | None = None
) -> Preflight:
    """Check the ids against GET /models and the key against GET /key (both free).

    A provider that offers neither list is not checked (the first request then tells).
    """
    client = client or httpx.Client(timeout=httpx.Timeout(PREFLIGHT_TIMEOUT_S, connect=CONNECT_TIMEOUT_S))
    base = base_url.rstrip("/")
    try:
        response = client.get(f"{base}/models")
    except httpx.TransportError as exc:
        line = connection_line(base, exc, remote=True)
        return Preflight({m: line for m in model_ids}, [])
    known: list[str] = []
    if response.status_code == 200:
        try:
            known = [str(m["id"]) for m in response.json().get("data", []) if isinstance(m, dict) and "id" in m]
        except (ValueError, AttributeError):
            known = []
    causes = {m: unknown_model_line(m, known) for m in model_ids if known and m not in known}
    if api_key:
        try:
            key = client.get(f"{base}/key", headers={"Authorization": f"Bearer {api_key}"})
        except httpx.TransportError:
            key = None
        if key is not None and key.status_code == 401:
            spec = ModelSpec(id="-", name="-", scale="-", provider="openrouter", slug="-")
            line, _ = cause_line(401, error_message(key.content), spec, False)
            causes = {m: line for m in model_ids}
        elif key is not None and key.status_code == 200:
            spent = _spent_key_line(key)
            if spent:
                causes = {m: spent for m in model_ids}
    return Preflight(causes, known)


def _spent_key_line(response: httpx.Response) -> str | None:
    """A line when the key's own credit limit is used up (GET /key: `limit_remaining` <= 0)."""
    try:
        data = response.json().get("data") or {}
        remaining, limit = data.get("limit_remaining"), data.get("limit")
    except (ValueError, AttributeError):
        return None
    if isinstance(remaining, (int, float)) and remaining <= 0:
        return (
            f"The OpenRouter key's credit limit is used up ({remaining} of {limit} left). Fix: raise the key's limit at "
            "https://openrouter.ai/keys, or use another key."
        )
    return None
