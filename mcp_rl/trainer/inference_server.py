"""HTTP inference on the current policy: SGLang-style `/generate`, vLLM-style token-in
`/inference/v1/generate`, and OpenAI-style completions.

Atropos's `sglang` server type (and ManagedServer on top of it) posts token ids to `/generate`
and reads tokens + logprobs back: that is what training needs. verifiers v1's `TrainClient`
(through `renderers.client.generate`) posts token ids to `/inference/v1/generate` and checks
that every `logprobs.content[i].token` is `"token_id:<choices[0].token_ids[i]>"` with a finite
logprob: the same samples, in vLLM's shape. The OpenAI endpoints serve
everything else (smoke tests, chat clients). All of them sample through one `Sampler`, so a
trainer's server always answers from the latest weights.

Sampling runs in a worker thread, so a long sample never blocks the server's event loop
(/health answers while the model is busy).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import threading
import time
from typing import Any

import anyio
import uvicorn
from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field

from mcp_rl.trainer.backends.base import SampledSequence, Sampler, SamplingRequest
from mcp_rl.trainer.batcher import RequestAbandoned, still_wanted

log = logging.getLogger(__name__)

DEFAULT_MAX_TOKENS = 256


class GenerateRequest(BaseModel):
    model_config = ConfigDict(extra="allow")

    input_ids: list[int] | None = None
    text: str | None = None
    sampling_params: dict[str, Any] = Field(default_factory=dict)
    return_logprob: bool = False
    return_text_in_logprobs: bool = False


class TokenGenerateRequest(BaseModel):
    """vLLM's `/inference/v1/generate` body as verifiers' renderers client sends it."""

    model_config = ConfigDict(extra="allow")

    model: str | None = None
    token_ids: list[int]
    sampling_params: dict[str, Any] = Field(default_factory=dict)


# The context a prompt plus its completion may fill, reported as vLLM's `max_model_len` on
# /v1/models (renderers refuses longer prompts before sending them).
DEFAULT_MAX_MODEL_LEN = 8192
# OpenAI's own limits on how many alternatives a position may list.
MAX_CHAT_TOP = 20
MAX_COMPLETION_TOP = 5


class CompletionRequest(BaseModel):
    model_config = ConfigDict(extra="allow")

    model: str | None = None
    prompt: str | list[int] | list[str] = ""
    max_tokens: int | None = 16
    temperature: float = 1.0
    top_p: float = 1.0
    n: int = 1
    stop: str | list[str] | None = None
    logprobs: int | bool | None = None
    seed: int | None = None


class ChatRequest(BaseModel):
    model_config = ConfigDict(extra="allow")

    model: str | None = None
    messages: list[dict[str, Any]]
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    temperature: float = 1.0
    top_p: float = 1.0
    n: int = 1
    stop: str | list[str] | None = None
    logprobs: bool | None = False
    top_logprobs: int | None = None
    seed: int | None = None


def _stops(stop: str | list[str] | None) -> list[str]:
    if stop is None:
        return []
    return [stop] if isinstance(stop, str) else [s for s in stop if s]


def chat_prompt_tokens(tokenizer: Any, messages: list[dict[str, Any]]) -> list[int]:
    """Token ids of a chat prompt ending with the assistant's turn opener."""
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return list(tokenizer.encode(text, add_special_tokens=False))


class InferenceService:
    """The endpoint logic, independent of the web framework (unit-testable)."""

    def __init__(
        self, sampler: Sampler, *, ready: threading.Event | None = None, only_model: str | None = None
    ) -> None:
        self.sampler = sampler
        # Set when serving one named model (mcp-rl serve-model, a served checkpoint): a request
        # naming another one is refused, not answered by this model under that name.
        self.only_model = only_model
        self._ids = itertools.count(1)
        # The trainer sets this once its model is loaded (and resumed); /health reports it.
        self.ready = ready or threading.Event()
        if ready is None:
            self.ready.set()

    @property
    def tokenizer(self) -> Any:
        return self.sampler.tokenizer

    def _decode(self, tokens: list[int]) -> str:
        return str(self.tokenizer.decode(tokens, skip_special_tokens=True))

    def _sample(
        self,
        prompt: list[int],
        *,
        n: int,
        max_tokens: int | None,
        temperature: float,
        top_p: float,
        stop: list[str],
        stop_token_ids: list[int] | None = None,
        seed: int | None = None,
    ) -> list[SampledSequence]:
        if not prompt:
            raise ValueError("the prompt is empty")
        if n < 1 or n > 256:
            raise ValueError("n must be between 1 and 256")
        request = SamplingRequest(
            prompt_tokens=prompt,
            n=n,
            max_tokens=DEFAULT_MAX_TOKENS if max_tokens is None else max(0, int(max_tokens)),
            temperature=temperature,
            top_p=top_p,
            stop=stop,
            stop_token_ids=list(stop_token_ids or []),
            seed=seed,
        )
        return self.sampler.sample(request)

    def _top(self, prompt: list[int], tokens: list[int], k: int, limit: int) -> list[list[tuple[int, float]]] | None:
        """The `k` most likely tokens at each position of a sampled completion (None: k is 0)."""
        if isinstance(k, bool) or not 0 <= k <= limit:
            raise ValueError(f"top logprobs must be between 0 and {limit}, got {k}")
        if k == 0:
            return None
        try:
            return self.sampler.top_logprobs(prompt, tokens, k)
        except NotImplementedError as exc:
            raise ValueError(f"{exc}: ask without top logprobs") from None

    def _entry(self, token: int, logprob: float) -> dict[str, Any]:
        piece = self.tokenizer.decode([token])
        return {"token": piece, "logprob": logprob, "bytes": list(piece.encode("utf-8"))}

    # --- SGLang /generate ------------------------------------------------------------------
    def generate(self, req: GenerateRequest) -> dict[str, Any] | list[dict[str, Any]]:
        params = dict(req.sampling_params)
        if req.input_ids is not None:
            prompt = list(req.input_ids)
        elif req.text is not None:
            prompt = list(self.tokenizer.encode(req.text, add_special_tokens=False))
        else:
            raise ValueError("give input_ids or text")
        n = int(params.get("n", 1) or 1)
        max_tokens = params.get("max_new_tokens", params.get("max_tokens", DEFAULT_MAX_TOKENS))
        seqs = self._sample(
            prompt,
            n=n,
            max_tokens=max_tokens,
            temperature=float(params.get("temperature", 1.0) if params.get("temperature") is not None else 1.0),
            top_p=float(params.get("top_p", 1.0) if params.get("top_p") is not None else 1.0),
            stop=_stops(params.get("stop")),
            stop_token_ids=params.get("stop_token_ids"),
            seed=params.get("seed"),
        )
        results = []
        for seq in seqs:
            entries = []
            for tok, lp in zip(seq.tokens, seq.logprobs, strict=True):
                text = self.tokenizer.decode([tok]) if req.return_text_in_logprobs else None
                entries.append([lp, tok, text])
            results.append(
                {
                    "text": self._decode(seq.tokens),
                    "output_ids": seq.tokens,
                    "meta_info": {
                        "prompt_tokens": len(prompt),
                        "completion_tokens": len(seq.tokens),
                        "finish_reason": {"type": seq.finish_reason},
                        "output_token_logprobs": entries,
                    },
                }
            )
        return results[0] if n == 1 else results

    # --- vLLM /inference/v1/generate (token in, token out) ---------------------------------
    def generate_tokens(self, req: TokenGenerateRequest) -> dict[str, Any]:
        params = dict(req.sampling_params)
        n = int(params.get("n", 1) or 1)
        temperature = params.get("temperature")
        top_p = params.get("top_p")
        seqs = self._sample(
            list(req.token_ids),
            n=n,
            max_tokens=params.get("max_tokens", params.get("max_completion_tokens")),
            temperature=1.0 if temperature is None else float(temperature),
            top_p=1.0 if top_p is None else float(top_p),
            stop=_stops(params.get("stop")),
            stop_token_ids=params.get("stop_token_ids"),
            seed=params.get("seed"),
        )
        choices = []
        for i, seq in enumerate(seqs):
            # The token is named by its id, never its text: the client checks the id, and a
            # piece of a multi-byte character has no faithful text.
            content = [
                {"token": f"token_id:{tok}", "logprob": float(lp)}
                for tok, lp in zip(seq.tokens, seq.logprobs, strict=True)
            ]
            choices.append(
                {
                    "index": i,
                    "token_ids": list(seq.tokens),
                    "logprobs": {"content": content},
                    "finish_reason": seq.finish_reason,
                }
            )
        return {
            "request_id": f"gen-{next(self._ids)}",
            "model": req.model or self.sampler.model_name,
            "prompt_token_ids": list(req.token_ids),
            "choices": choices,
            "usage": _usage(len(req.token_ids), seqs),
        }

    # --- OpenAI /v1/completions ------------------------------------------------------------
    def completions(self, req: CompletionRequest) -> dict[str, Any]:
        if isinstance(req.prompt, list) and req.prompt and isinstance(req.prompt[0], int):
            prompt = [int(t) for t in req.prompt]
        elif isinstance(req.prompt, list):
            if len(req.prompt) != 1:
                raise ValueError("only one prompt per request is supported")
            prompt = list(self.tokenizer.encode(str(req.prompt[0]), add_special_tokens=False))
        else:
            prompt = list(self.tokenizer.encode(req.prompt, add_special_tokens=False))
        seqs = self._sample(
            prompt,
            n=req.n,
            max_tokens=req.max_tokens,
            temperature=req.temperature,
            top_p=req.top_p,
            stop=_stops(req.stop),
            seed=req.seed,
        )
        choices = []
        for i, seq in enumerate(seqs):
            choice: dict[str, Any] = {"index": i, "text": self._decode(seq.tokens), "finish_reason": seq.finish_reason}
            if req.logprobs is not None and req.logprobs is not False:
                pieces = [self.tokenizer.decode([t]) for t in seq.tokens]
                offsets, pos = [], 0
                for piece in pieces:
                    offsets.append(pos)
                    pos += len(piece)
                # `logprobs: N` asks for the N most likely tokens at each position too.
                top = self._top(prompt, seq.tokens, int(req.logprobs), MAX_COMPLETION_TOP)
                choice["logprobs"] = {
                    "tokens": pieces,
                    "token_logprobs": seq.logprobs,
                    "top_logprobs": [dict((self.tokenizer.decode([t]), lp) for t, lp in row) for row in top]
                    if top is not None
                    else None,
                    "text_offset": offsets,
                    "token_ids": seq.tokens,
                }
            else:
                choice["logprobs"] = None
            choices.append(choice)
        return {
            "id": f"cmpl-{next(self._ids)}",
            "object": "text_completion",
            "created": int(time.time()),
            "model": req.model or self.sampler.model_name,
            "choices": choices,
            "usage": _usage(len(prompt), seqs),
        }

    # --- OpenAI /v1/chat/completions -------------------------------------------------------
    def chat_completions(self, req: ChatRequest) -> dict[str, Any]:
        if req.top_logprobs is not None and not req.logprobs:
            raise ValueError("top_logprobs needs logprobs: true")
        messages = [{"role": m.get("role", "user"), "content": _content_text(m.get("content"))} for m in req.messages]
        prompt = chat_prompt_tokens(self.tokenizer, messages)
        max_tokens = req.max_completion_tokens if req.max_completion_tokens is not None else req.max_tokens
        seqs = self._sample(
            prompt,
            n=req.n,
            max_tokens=max_tokens,
            temperature=req.temperature,
            top_p=req.top_p,
            stop=_stops(req.stop),
            seed=req.seed,
        )
        choices = []
        for i, seq in enumerate(seqs):
            choice: dict[str, Any] = {
                "index": i,
                "message": {"role": "assistant", "content": self._decode(seq.tokens)},
                "finish_reason": seq.finish_reason,
                "logprobs": None,
            }
            if req.logprobs:
                content = []
                top = self._top(prompt, seq.tokens, req.top_logprobs or 0, MAX_CHAT_TOP) or [[] for _ in seq.tokens]
                for tok, lp, best in zip(seq.tokens, seq.logprobs, top, strict=True):
                    piece = self.tokenizer.decode([tok])
                    content.append(
                        {
                            "token": piece,
                            "logprob": lp,
                            "bytes": list(piece.encode("utf-8")),
                            "top_logprobs": [self._entry(t, v) for t, v in best],
                            "token_id": tok,
                        }
                    )
                choice["logprobs"] = {"content": content}
            choices.append(choice)
        return {
            "id": f"chatcmpl-{next(self._ids)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": req.model or self.sampler.model_name,
            "choices": choices,
            "usage": _usage(len(prompt), seqs),
        }


def _content_text(content: Any) -> str:
    """OpenAI content may be a string or a list of parts; only text parts are understood."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type", "text") == "text")
    return str(content)


def _usage(prompt_len: int, seqs: list[SampledSequence]) -> dict[str, int]:
    completion = sum(len(s.tokens) for s in seqs)
    return {"prompt_tokens": prompt_len, "completion_tokens": completion, "total_tokens": prompt_len + completion}


def build_app(service: InferenceService, *, extra_health: Any = None, sampling_concurrency: int = 1) -> Any:
    """The FastAPI app around `service`. `extra_health()` adds fields to /health.
    `sampling_concurrency` requests are sampled at once (1 for a local model; a remote service
    such as Tinker serves many, and serialising them puts every group behind network latency)."""
    app = FastAPI(title="mcp-rl inference", docs_url=None, redoc_url=None)
    gates: dict[str, asyncio.Semaphore] = {}
    limiters: dict[str, anyio.CapacityLimiter] = {}

    async def _run(fn: Any, req: Any, request: Request) -> Any:
        if not service.ready.is_set():
            raise HTTPException(status_code=503, detail="model not loaded yet")
        asked = getattr(req, "model", None)
        if service.only_model is not None and asked and asked != service.only_model:
            raise HTTPException(
                status_code=404,
                detail=f"model {asked!r} is not served here; this server serves {service.only_model!r} (GET /v1/models)",
            )
        # At most `sampling_concurrency` samples at once (one for a local model: it is serialised
        # anyway); a request whose client gave up while queued is skipped: Atropos cancels its
        # workers whenever its queue is full, and sampling for nobody would steal the CPU from
        # the trainer.
        gate = gates.setdefault("sample", asyncio.Semaphore(sampling_concurrency))
        # Its own worker threads: anyio's shared pool (40) must not cap a larger concurrency.
        limiter = limiters.setdefault("sample", anyio.CapacityLimiter(sampling_concurrency))
        async with gate:
            if await request.is_disconnected():
                return Response(status_code=499)
            # A batching sampler queues the request again; it skips it if the client leaves
            # meanwhile (the worker thread sees `still_wanted` through the copied context).
            gone = threading.Event()
            token = still_wanted.set(lambda: not gone.is_set())
            watcher = asyncio.create_task(_watch_disconnect(request, gone))
            try:
                return await anyio.to_thread.run_sync(fn, req, limiter=limiter)
            except RequestAbandoned:
                return Response(status_code=499)
            except ValueError as exc:
                raise HTTPException(status_code=400, detail=str(exc)) from exc
            except Exception as exc:  # reported to the caller, logged here with its traceback
                log.exception("inference failed")
                raise HTTPException(status_code=500, detail=f"{type(exc).__name__}: {exc}") from exc
            finally:
                watcher.cancel()
                still_wanted.reset(token)

    @app.get("/health")
    def health() -> JSONResponse:
        body = {
            "status": "ok" if service.ready.is_set() else "loading",
            "model": service.sampler.model_name,
            "ready": service.ready.is_set(),
        }
        if extra_health is not None:
            body.update(extra_health())
        return JSONResponse(body, status_code=200 if service.ready.is_set() else 503)

    @app.get("/v1/models")
    def models() -> dict[str, Any]:
        card = {
            "id": service.sampler.model_name,
            "object": "model",
            "owned_by": "mcp-rl",
            "max_model_len": DEFAULT_MAX_MODEL_LEN,
        }
        return {"object": "list", "data": [card]}

    @app.post("/generate")
    async def generate(req: GenerateRequest, request: Request) -> Any:
        return await _run(service.generate, req, request)

    @app.post("/inference/v1/generate")
    async def generate_tokens(req: TokenGenerateRequest, request: Request) -> Any:
        return await _run(service.generate_tokens, req, request)

    @app.post("/v1/completions")
    async def completions(req: CompletionRequest, request: Request) -> Any:
        return await _run(service.completions, req, request)

    @app.post("/v1/chat/completions")
    async def chat(req: ChatRequest, request: Request) -> Any:
        return await _run(service.chat_completions, req, request)

    return app


async def _watch_disconnect(request: Request, gone: threading.Event, interval_s: float = 0.25) -> None:
    """Set `gone` when the client disconnects (cancelled once the request is answered)."""
    # Starlette offers no disconnect event for a request whose body was read: poll it.
    while not await request.is_disconnected():  # noqa: ASYNC110
        await asyncio.sleep(interval_s)
    gone.set()


class ServerThread:
    """uvicorn in a daemon thread with its own event loop (so it installs no signal handlers:
    SIGTERM stays with the trainer's main loop)."""

    def __init__(self, app: Any, host: str, port: int) -> None:
        config = uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False, lifespan="off")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, name="inference-server", daemon=True)
        self.host, self.port = host, port

    def start(self, timeout_s: float = 30.0) -> None:
        self.thread.start()
        deadline = time.monotonic() + timeout_s
        while not self.server.started:
            if not self.thread.is_alive():
                raise RuntimeError(f"the inference server could not start on {self.host}:{self.port} (port in use?)")
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"the inference server did not start on {self.host}:{self.port} in {timeout_s:.0f} s"
                )
            time.sleep(0.05)

    def stop(self, timeout_s: float = 5.0) -> None:
        self.server.should_exit = True
        self.thread.join(timeout_s)
