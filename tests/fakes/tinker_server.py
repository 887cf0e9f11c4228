"""FAKE Tinker at the wire: a loopback HTTP server speaking the parts of Tinker's REST API that
the trainer's backend uses, for the REAL `tinker.ServiceClient` (SDK 0.38) to talk to.

Endpoints (all under /api/v1, the SDK's own paths and JSON/protobuf shapes): client config,
sessions (create, heartbeat, finish), create_model, get_info, load_weights, forward_backward
(protobuf request, protobuf result), optim_step, save_weights, save_weights_for_sampler (named
or ephemeral), sampling sessions, asample (protobuf result), retrieve_future and telemetry;
billing usage (GET /api/v1/billing/usage/events: what the wire received, per session, at the
fake's own BILLED_USD_PER_MILLION; 403 when `billing_role` is False).

Behaviour a test can rely on:
- Every request must carry the API key (`X-API-Key`); others get 401 and are counted.
- Every operation answers with a future; `retrieve_future` says "try_again" until the future
  is ready (the first poll of each future always does, like a busy service), then delivers.
- Training requests (forward, forward_backward, optim_step, saves, loads) finish at the next
  tick of a clock of `Latency.cycle_s` seconds, in order: requests submitted together share a
  tick (Tinker's clock cycles). Samples take `Latency.sample_s` each and run concurrently.
- The "policy" is a deterministic function of (weights version, position, token); optim_step
  bumps the version. `importance_sampling` computes Tinker's loss from the datum it got:
  `-sum_t exp(target_logprob_t - logprobs_t) * advantages_t`, recording every ratio.
- Everything received is recorded on the `TinkerWire` object.
"""

from __future__ import annotations

import asyncio
import json
import math
import threading
import time
import zlib
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Self

import numpy as np

from tests.kit.loopback import LoopbackServer

API_KEY = "tml-loopback-test-key"
# A sampler of a base model (create_sampling_session with base_model, no model_path) in `samplers`.
BASE_PREFIX = "base:"
LONG_POLL_S = 0.5


@dataclass
class Latency:
    sample_s: float = 0.0
    cycle_s: float = 0.0
    create_model_s: float = 0.0


def policy_logprob(version: int, position: int, token: int) -> float:
    """The fake model's logprob of `token` at `position` under weights `version` (always < 0)."""
    return -0.05 - ((token * 31 + position * 7 + version * 13) % 17) / 10.0


@dataclass
class Future:
    kind: str
    ready_at: float
    payload: Any  # dict (JSON) or bytes (protobuf)
    polls: int = 0
    delivered_at: float | None = None


@dataclass
class Model:
    model_id: str
    base_model: str
    rank: int
    version: int = 0
    last_ready: float = 0.0
    run: str = ""


@dataclass
class TinkerWire:
    """The fake service's state and everything it received."""

    api_key: str = API_KEY
    # Which Tinker the fake is: "0.38" (hosted Tinker, today's SDK) or "0.25" (a self-hosted
    # server as SkyRL 0.4.0's Tinker API speaks it: no sample_sequence_ids, `metrics={}`, resume
    # only as create_model + load_weights(model_id) (422 without it), no checkpoint TTL route
    # (405), no session finish (404)).
    dialect: str = "0.38"
    latency: Latency = field(default_factory=Latency)
    tokenizer_id: str | None = None
    finish_status: int = 200
    requests: list[tuple[str, float]] = field(default_factory=list)
    unauthorized: int = 0
    sessions: dict[str, dict[str, Any]] = field(default_factory=dict)
    models: dict[str, Model] = field(default_factory=dict)
    created: list[dict[str, Any]] = field(default_factory=list)
    loads: list[dict[str, Any]] = field(default_factory=list)
    forward_backward: list[dict[str, Any]] = field(default_factory=list)
    forwards: list[dict[str, Any]] = field(default_factory=list)
    optim_steps: list[dict[str, Any]] = field(default_factory=list)
    saves: list[dict[str, Any]] = field(default_factory=list)
    samplers: dict[str, tuple[str, int]] = field(default_factory=dict)
    # create_sampling_session requests: what each named (model_path, or base_model alone)
    sampling_sessions: list[dict[str, Any]] = field(default_factory=list)
    samples: list[dict[str, Any]] = field(default_factory=list)
    max_samples_in_flight: int = 0
    futures: dict[str, Future] = field(default_factory=dict)
    # --- checkpoints and weights export (see the block "checkpoint endpoints" below) ---
    # The files an external-weights export of any model holds (name -> bytes); a test may put
    # an escaping name in it.
    export_files: dict[str, bytes] = field(default_factory=lambda: dict(DEFAULT_EXPORT_FILES))
    ttl_calls: list[tuple[str, int | None]] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    expiry: dict[str, float | None] = field(default_factory=dict)
    exports: list[dict[str, Any]] = field(default_factory=list)
    downloads: list[str] = field(default_factory=list)
    # --- billing (GET /api/v1/billing/usage/events, AdminClient.get_billing_usage) ---
    # False: the key lacks the admin / billing-admin role (403), as for most users' keys.
    billing_role: bool = True
    billing_queries: list[dict[str, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._t0 = time.monotonic()
        self._counter = 0
        self._in_flight = 0

    # --- bookkeeping --------------------------------------------------------------------------
    def _id(self, prefix: str) -> str:
        with self._lock:
            self._counter += 1
            return f"{prefix}-{self._counter}"

    def _tick(self, model: Model) -> float:
        """When a training request arriving now finishes: the next clock tick, after the model's
        previous request."""
        now = time.monotonic()
        cycle = self.latency.cycle_s
        ready = now if cycle <= 0 else self._t0 + (math.floor((now - self._t0) / cycle) + 1) * cycle
        ready = max(ready, model.last_ready)
        model.last_ready = ready
        return ready

    def tick_of(self, ready_at: float) -> int:
        cycle = self.latency.cycle_s or 1.0
        return round((ready_at - self._t0) / cycle)

    def future(self, kind: str, ready_at: float, payload: Any, **extra: Any) -> dict[str, Any]:
        request_id = self._id(kind)
        self.futures[request_id] = Future(kind, ready_at, payload)
        return {"request_id": request_id, **extra}

    def delivered(self, request_id: str) -> bool:
        return self.futures[request_id].delivered_at is not None

    def paths(self) -> list[str]:
        return [p for p, _ in self.requests]


# --- protobuf payloads ------------------------------------------------------------------------
def _decode_datums(body: bytes) -> tuple[Any, list[dict[str, np.ndarray]]]:
    from tinker.proto import tinker_public_pb2 as pb

    msg = pb.ForwardBackwardRequest()
    msg.ParseFromString(body)
    dtypes = {pb.DTYPE_FLOAT32: np.float32, pb.DTYPE_INT64: np.int64}
    datums = []
    for d in msg.data:
        tokens = np.concatenate([np.frombuffer(c.encoded_text.tokens, dtype=np.int32) for c in d.model_input])
        inputs = {name: np.frombuffer(t.dense, dtype=dtypes[t.dtype]) for name, t in d.loss_fn_inputs.items()}
        datums.append({"model_input": tokens.astype(np.int64), **inputs})
    return msg, datums


def _batched(arrays: list[np.ndarray], dtype: Any) -> Any:
    from tinker.proto import tinker_public_pb2 as pb

    parts = [np.asarray(a, dtype=dtype) for a in arrays]
    offsets = np.cumsum([0] + [p.nbytes for p in parts]).astype(np.int64)
    return pb.BatchedTensor(
        data=b"".join(p.tobytes() for p in parts), offsets=offsets.tobytes(), dtype=pb.DTYPE_FLOAT32
    )


def _fwd_bwd_output(logprobs: list[np.ndarray], losses: list[np.ndarray], loss: float, metrics: bool = True) -> bytes:
    from tinker.proto import tinker_public_pb2 as pb

    record = pb.ArrayRecord(type_tag="ArrayRecord", num_datums=len(logprobs))
    record.fields["logprobs"].CopyFrom(_batched(logprobs, np.float32))
    record.fields["elementwise_loss"].CopyFrom(_batched(losses, np.float32))
    out = pb.ForwardBackwardOutput(loss_fn_output_type="ArrayRecord", loss_fn_outputs=[record])
    if metrics:
        out.metrics["loss:sum"] = loss
    return out.SerializeToString()


def _sample_output(sequences: list[tuple[list[int], list[float], bool]], prompt_logprobs: list[float] | None) -> bytes:
    from tinker.proto import tinker_public_pb2 as pb

    out = pb.SampleResponse()
    for tokens, logprobs, hit_length in sequences:
        out.sequences.add(
            stop_reason=pb.STOP_REASON_LENGTH if hit_length else pb.STOP_REASON_STOP,
            tokens=np.asarray(tokens, dtype=np.int32).tobytes(),
            logprobs=np.asarray(logprobs, dtype=np.float32).tobytes(),
        )
    if prompt_logprobs is not None:
        out.prompt_logprobs = np.asarray(prompt_logprobs, dtype=np.float32).tobytes()
    return out.SerializeToString()


# --- the HTTP app -----------------------------------------------------------------------------
def build_app(wire: TinkerWire) -> Any:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    def ok(body: Any) -> JSONResponse:
        return JSONResponse(body)

    checkpoint_routes = build_checkpoint_routes(wire)

    async def guarded(request: Request) -> Response:
        wire.requests.append((request.url.path, time.monotonic()))
        if request.url.path.startswith(SIGNED_PREFIX):  # a signed URL carries no API key
            return await checkpoint_routes(request)
        if request.headers.get("x-api-key") != wire.api_key:
            wire.unauthorized += 1
            return JSONResponse({"detail": "invalid API key"}, status_code=401)
        handler = HANDLERS.get((request.method, request.url.path))
        if (
            handler is None
            and request.url.path.startswith("/api/v1/sessions/")
            and request.url.path.endswith("/finish")
        ):
            handler = finish
        if handler is None and request.method == "GET" and request.url.path.startswith("/api/v1/samplers/"):
            handler = get_sampler
        if handler is None and (
            request.url.path.startswith("/api/v1/training_runs/") or request.url.path == "/api/v1/save_weights_external"
        ):
            handler = checkpoint_routes
        if handler is None:
            return JSONResponse(
                {"detail": f"not served by the fake: {request.method} {request.url.path}"}, status_code=404
            )
        return await handler(request)

    async def body(request: Request) -> dict[str, Any]:
        raw = await request.body()
        return json.loads(raw) if raw else {}

    async def client_config(request: Request) -> Response:
        # All flags at the SDK's defaults, except httpx's own transport (no native extension).
        return ok({"use_pyqwest_transport": False})

    async def dynamic_config(request: Request) -> Response:
        if wire.dialect == "0.25":  # SkyRL's server has no such route
            return JSONResponse({"detail": "Not Found"}, status_code=404)
        return ok({})

    async def telemetry(request: Request) -> Response:
        return ok({"status": "accepted"})

    async def create_session(request: Request) -> Response:
        session_id = wire._id("session")
        wire.sessions[session_id] = {"request": await body(request), "finished": None, "heartbeats": 0}
        return ok({"type": "create_session", "session_id": session_id})

    async def heartbeat(request: Request) -> Response:
        session = wire.sessions[(await body(request))["session_id"]]
        session["heartbeats"] += 1
        return ok({"type": "session_heartbeat"})

    async def weights_info(request: Request) -> Response:
        path = (await body(request))["tinker_path"]
        saved = next((s for s in wire.saves if s.get("path") == path), None)
        if saved is None:
            return JSONResponse({"detail": f"no checkpoint {path}"}, status_code=404)
        model = wire.models[saved["model_id"]]
        return ok({"base_model": model.base_model, "is_lora": True, "lora_rank": model.rank})

    async def finish(request: Request) -> Response:
        session_id = request.url.path.split("/")[-2]
        if wire.dialect == "0.25":
            return JSONResponse({"detail": "Not Found"}, status_code=404)
        data = await body(request)
        if wire.finish_status != 200:
            return JSONResponse({"detail": "finish refused"}, status_code=wire.finish_status)
        wire.sessions[session_id]["finished"] = data["reason"]["type"]
        wire.sessions[session_id]["detail"] = data.get("detail")
        return ok({})

    def _model(session_id: str, seq: int, base_model: str, rank: int) -> Model:
        model_id = f"{session_id}:train:{seq}"
        model = Model(model_id, base_model, rank, run=f"run-{len(wire.models) + 1}")
        wire.models[model_id] = model
        return model

    async def create_model(request: Request) -> Response:
        data = await body(request)
        wire.created.append(data)
        model = _model(data["session_id"], data["model_seq_id"], data["base_model"], data["lora_config"]["rank"])
        ready = time.monotonic() + wire.latency.create_model_s
        model.last_ready = ready
        return ok(wire.future("create_model", ready, {"model_id": model.model_id, "type": "create_model"}))

    async def get_info(request: Request) -> Response:
        model = wire.models[(await body(request))["model_id"]]
        return ok(
            {
                "type": "get_info",
                "model_id": model.model_id,
                "is_lora": True,
                "lora_rank": model.rank,
                "model_name": model.base_model,
                "model_data": {"arch": "fake", "model_name": model.base_model, "tokenizer_id": wire.tokenizer_id},
            }
        )

    async def load_weights(request: Request) -> Response:
        data = await body(request)
        wire.loads.append(data)
        if wire.dialect == "0.25" and data.get("model_id") is None:
            return JSONResponse({"detail": [{"loc": ["body", "model_id"], "msg": "field required"}]}, status_code=422)
        if data.get("session_id") is not None and data.get("model_id") is None:  # creation straight from a checkpoint
            model = _model(data["session_id"], data["model_seq_id"], data.get("base_model") or "loaded", 0)
        else:
            model = wire.models[data["model_id"]]
        return ok(
            wire.future(
                "load_weights",
                wire._tick(model),
                {"type": "load_weights", "path": data["path"], "model_id": model.model_id},
            )
        )

    async def forward_backward(request: Request) -> Response:
        msg, datums = _decode_datums(await request.body())
        model = wire.models[msg.model_id]
        record: dict[str, Any] = {
            "session": msg.model_id.split(":")[0],
            "loss_fn": msg.loss_fn,
            "version": model.version,
            "arrived": time.monotonic(),
            "datums": datums,
            "ratios": [],
            "logprobs": [],
        }
        out_logprobs, out_losses, total = [], [], 0.0
        for d in datums:
            current = np.array(
                [policy_logprob(model.version, i, int(t)) for i, t in enumerate(d["target_tokens"])], dtype=np.float64
            )
            if msg.loss_fn == "importance_sampling":
                ratio = np.exp(current - d["logprobs"].astype(np.float64))
                losses = -ratio * d["advantages"].astype(np.float64)
                record["ratios"].append(ratio)
            elif msg.loss_fn == "cross_entropy":
                losses = -current * d["weights"].astype(np.float64)
            else:
                return JSONResponse({"detail": f"loss {msg.loss_fn} not served by the fake"}, status_code=400)
            record["logprobs"].append(current)
            out_logprobs.append(current)
            out_losses.append(losses)
            total += float(losses.sum())
        record["loss"] = total
        (wire.forwards if msg.forward_only else wire.forward_backward).append(record)
        ready = wire._tick(model)
        record["ready_at"] = ready
        answer = wire.future(
            "forward" if msg.forward_only else "forward_backward",
            ready,
            _fwd_bwd_output(out_logprobs, out_losses, total, metrics=wire.dialect != "0.25"),
            model_id=model.model_id,
        )
        record["request_id"] = answer["request_id"]
        return ok(answer)

    async def optim_step(request: Request) -> Response:
        data = await body(request)
        model = wire.models[data["model_id"]]
        model.version += 1
        # Which forward_backward results the client had already received when this arrived.
        fb_ids = [r["request_id"] for r in wire.forward_backward]
        ready = wire._tick(model)
        wire.optim_steps.append(
            {
                "params": data.get("adam_params") or data.get("optim_params"),
                "arrived": time.monotonic(),
                "ready_at": ready,
                "undelivered_fwd_bwd": [i for i in fb_ids if not wire.delivered(i)],
            }
        )
        return ok(wire.future("optim_step", ready, {"metrics": {}}, model_id=model.model_id))

    async def save_weights(request: Request) -> Response:
        data = await body(request)
        model = wire.models[data["model_id"]]
        existing = {s["name"] for s in wire.saves if s["kind"] == "state" and s["model_id"] == model.model_id}
        ready = wire._tick(model)
        if data["path"] in existing and not data.get("overwrite"):
            return ok(
                wire.future("save_weights", ready, {"error": f"checkpoint {data['path']} exists", "category": "user"})
            )
        path = f"tinker://{model.run}/weights/{data['path']}"
        wire.saves.append(
            {
                "kind": "state",
                "name": data["path"],
                "ttl_seconds": data.get("ttl_seconds"),
                "model_id": model.model_id,
                "path": path,
                "version": model.version,
                "ready_at": ready,
            }
        )
        return ok(wire.future("save_weights", ready, {"type": "save_weights", "path": path}))

    async def save_for_sampler(request: Request) -> Response:
        data = await body(request)
        model = wire.models[data["model_id"]]
        ready = wire._tick(model)
        if data.get("path") is None:  # ephemeral: a sampling session, no checkpoint
            sampler_id = f"{model.model_id}:sample:{data['sampling_session_seq_id']}"
            wire.samplers[sampler_id] = (model.model_id, model.version)
            wire.saves.append(
                {
                    "kind": "ephemeral",
                    "name": None,
                    "ttl_seconds": data.get("ttl_seconds"),
                    "model_id": model.model_id,
                    "version": model.version,
                    "ready_at": ready,
                }
            )
            return ok(wire.future("save_weights_for_sampler", ready, {"sampling_session_id": sampler_id}))
        path = f"tinker://{model.run}/sampler_weights/{data['path']}"
        wire.saves.append(
            {
                "kind": "sampler",
                "name": data["path"],
                "ttl_seconds": data.get("ttl_seconds"),
                "model_id": model.model_id,
                "path": path,
                "version": model.version,
                "ready_at": ready,
            }
        )
        return ok(wire.future("save_weights_for_sampler", ready, {"path": path}))

    async def create_sampling_session(request: Request) -> Response:
        data = await body(request)
        path = data.get("model_path") or ""
        wire.sampling_sessions.append({"model_path": data.get("model_path"), "base_model": data.get("base_model")})
        if not path and data.get("base_model"):  # the base model itself: its weights never trained
            sampler_id = f"{data['session_id']}:sample:{data['sampling_session_seq_id']}"
            wire.samplers[sampler_id] = (BASE_PREFIX + data["base_model"], 0)
            return ok({"type": "create_sampling_session", "sampling_session_id": sampler_id})
        saved = [s for s in wire.saves if s.get("path") == path]
        if not saved:
            return JSONResponse({"detail": f"unknown model_path {path!r}"}, status_code=404)
        sampler_id = f"{data['session_id']}:sample:{data['sampling_session_seq_id']}"
        wire.samplers[sampler_id] = (saved[-1]["model_id"], saved[-1]["version"])
        return ok({"type": "create_sampling_session", "sampling_session_id": sampler_id})

    async def get_sampler(request: Request) -> Response:
        sampler_id = request.url.path.rsplit("/", 1)[-1]
        model_id, _ = wire.samplers[sampler_id]
        base = (
            model_id.removeprefix(BASE_PREFIX) if model_id.startswith(BASE_PREFIX) else wire.models[model_id].base_model
        )
        return ok({"sampler_id": sampler_id, "base_model": base})

    async def asample(request: Request) -> Response:
        data = await body(request)
        _, version = wire.samplers[data["sampling_session_id"]]
        prompt = [t for chunk in data["prompt"]["chunks"] for t in chunk["tokens"]]
        params = data["sampling_params"]
        max_tokens = params.get("max_tokens") or 16
        sequences = []
        for n in range(data.get("num_samples", 1)):
            seed = zlib.crc32(json.dumps([prompt, n, data.get("seq_id")]).encode())
            # Today's Tinker stops at EOS by itself; SkyRL's server (0.25) only at stops it is given.
            runs_on = wire.dialect == "0.25" and not params.get("stop")
            length = max_tokens if runs_on else min(max_tokens, 3)
            tokens = [10 + (seed >> (4 * j)) % 90 for j in range(length)]
            logprobs = [policy_logprob(version, len(prompt) + j, t) for j, t in enumerate(tokens)]
            sequences.append((tokens, logprobs, length == max_tokens))
        prompt_logprobs = None
        if data.get("prompt_logprobs"):
            prompt_logprobs = [math.nan] + [policy_logprob(version, i, t) for i, t in enumerate(prompt[1:])]
        arrived = time.monotonic()
        wire.samples.append(
            {
                "session": data["sampling_session_id"].split(":")[0],
                "prompt": prompt,
                "params": params,
                "num_samples": data.get("num_samples"),
                # What the service generates (billed as sampled tokens).
                "sampled_tokens": sum(len(tokens) for tokens, _, _ in sequences),
                "version": version,
                "arrived": arrived,
            }
        )
        with wire._lock:
            wire._in_flight += 1
            wire.max_samples_in_flight = max(wire.max_samples_in_flight, wire._in_flight)
        ids = (
            {}
            if wire.dialect == "0.25"
            else {"sample_sequence_ids": [f"seq-{data.get('seq_id')}-{i}" for i in range(len(sequences))]}
        )
        answer = wire.future(
            "sample", arrived + wire.latency.sample_s, _sample_output(sequences, prompt_logprobs), **ids
        )
        return ok(answer)

    async def retrieve_future(request: Request) -> Response:
        request_id = (await body(request))["request_id"]
        fut = wire.futures.get(request_id)
        if fut is None:
            return JSONResponse({"detail": f"unknown future {request_id}"}, status_code=404)
        fut.polls += 1
        wait = fut.ready_at - time.monotonic()
        if wait > 0 and fut.polls > 1:
            await asyncio.sleep(min(wait, LONG_POLL_S))  # a long poll, as the service does
        if fut.polls == 1 or time.monotonic() < fut.ready_at:
            state = "paused_capacity" if fut.kind == "create_model" else "active"
            return ok({"type": "try_again", "request_id": request_id, "queue_state": state})
        if fut.delivered_at is None:
            fut.delivered_at = time.monotonic()
            if fut.kind == "sample":
                with wire._lock:
                    wire._in_flight -= 1
        if isinstance(fut.payload, bytes):
            return Response(fut.payload, media_type="application/x-protobuf")
        return ok(fut.payload)

    async def billing_usage(request: Request) -> Response:
        return billing_answer(wire, dict(request.query_params))

    HANDLERS = {
        ("GET", "/api/v1/billing/usage/events"): billing_usage,
        ("POST", "/api/v1/client/config"): client_config,
        ("POST", "/api/v1/client/dynamic_config"): dynamic_config,
        ("POST", "/api/v1/telemetry"): telemetry,
        ("POST", "/api/v1/create_session"): create_session,
        ("POST", "/api/v1/session_heartbeat"): heartbeat,
        ("POST", "/api/v1/create_model"): create_model,
        ("POST", "/api/v1/get_info"): get_info,
        ("POST", "/api/v1/load_weights"): load_weights,
        ("POST", "/api/v1/weights_info"): weights_info,
        ("POST", "/api/v1/forward_backward"): forward_backward,
        ("POST", "/api/v1/optim_step"): optim_step,
        ("POST", "/api/v1/save_weights"): save_weights,
        ("POST", "/api/v1/save_weights_for_sampler"): save_for_sampler,
        ("POST", "/api/v1/create_sampling_session"): create_sampling_session,
        ("POST", "/api/v1/asample"): asample,
        ("POST", "/api/v1/retrieve_future"): retrieve_future,
    }
    return Starlette(routes=[Route("/{path:path}", guarded, methods=["GET", "POST", "PUT", "DELETE"])])


# --- billing: what Tinker's billing API answers (tinker 0.38 types/billing_usage_response.py) ---
# Hourly buckets per session; this fake puts everything in the current hour. Its own "invoice"
# rates differ from configs/pricing.yaml on purpose, so billed and estimated figures differ.
BILLED_USD_PER_MILLION = {"training": 0.5, "sampling_prefill": 0.2, "sampling_sample": 0.7}


def billing_answer(wire: TinkerWire, params: dict[str, str]) -> Any:
    from starlette.responses import JSONResponse

    wire.billing_queries.append(params)
    if not wire.billing_role:
        return JSONResponse({"detail": "billing view access is required (admin or billing-admin)"}, status_code=403)
    try:
        start = datetime.fromisoformat(params["starting_on"].replace("Z", "+00:00"))
        end = datetime.fromisoformat(params["ending_before"].replace("Z", "+00:00"))
    except (KeyError, ValueError):
        return JSONResponse({"detail": "starting_on and ending_before are required (RFC 3339)"}, status_code=400)
    if any(t.minute or t.second or t.microsecond for t in (start, end)) or not start < end:
        return JSONResponse({"detail": "the window must be aligned to UTC hour boundaries"}, status_code=400)
    hour = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    if not start <= hour < end:
        return JSONResponse({"data": [], "sessions": {}, "cost_data_through": None})
    counts: dict[tuple[str, str], int] = {}
    for sample in wire.samples:
        sid = sample["session"]
        counts[(sid, "sampling_prefill")] = counts.get((sid, "sampling_prefill"), 0) + len(sample["prompt"])
        counts[(sid, "sampling_sample")] = counts.get((sid, "sampling_sample"), 0) + sample["sampled_tokens"]
    for fb in [*wire.forward_backward, *wire.forwards]:
        tokens = sum(len(d["target_tokens"]) for d in fb["datums"])
        counts[(fb["session"], "training")] = counts.get((fb["session"], "training"), 0) + tokens
    data: list[dict[str, Any]] = []
    bucket = {"bucket_start": hour.isoformat(), "bucket_end": (hour + timedelta(hours=1)).isoformat()}
    for (sid, kind), count in sorted(counts.items()):
        rate = BILLED_USD_PER_MILLION[kind]
        info: dict[str, Any] = {"type": kind, "token_count": count}
        if kind == "sampling_prefill":
            info["cached"] = False
        data.append(
            {
                **bucket,
                "session_id": sid,
                "estimated_cost_usd": rate * count / 1_000_000,
                "effective_rate_usd_per_million_tokens": rate,
                "event_info": info,
            }
        )
    saves: dict[str, int] = {}
    for save in wire.saves:
        sid = str(save.get("model_id", "")).split(":")[0]
        saves[sid] = saves.get(sid, 0) + 1
    for sid, count in sorted(saves.items()):  # checkpoint operations: never priced
        data.append({**bucket, "session_id": sid, "event_info": {"type": "checkpoint", "count": count}})
    used = {event["session_id"] for event in data}
    sessions = {
        sid: {"user_metadata": (info["request"].get("user_metadata") or None)}
        for sid, info in wire.sessions.items()
        if sid in used
    }
    return JSONResponse({"data": data, "sessions": sessions, "cost_data_through": None})


# --- checkpoint endpoints: list, TTL, delete, save_weights_external, signed downloads ----------
# The paths the SDK's RestClient and TrainingClient.save_weights_external call (tinker 0.38,
# tinker/resources/weights.py and rest_client.py). Checkpoints are the named saves in
# `wire.saves`; a checkpoint id is "weights/<name>", "sampler_weights/<name>" or
# "external_weights/<name>". Signed URLs are served under SIGNED_PREFIX without the API key.
SIGNED_PREFIX = "/signed/"
DEFAULT_EXPORT_FILES = {
    "adapter_config.json": json.dumps(
        {"peft_type": "LORA", "r": 4, "lora_alpha": 8, "target_modules": ["q_proj"], "task_type": "CAUSAL_LM"}
    ).encode(),
    "adapter_model.safetensors": b"fake-safetensors-bytes",
}
SIGNED_URL_TTL_S = 3600.0


def build_checkpoint_routes(wire: TinkerWire) -> Any:
    import datetime as dt

    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response

    def iso(ts: float | None) -> str | None:
        return None if ts is None else dt.datetime.fromtimestamp(ts, tz=dt.UTC).isoformat()

    def named(run: str) -> list[dict[str, Any]]:
        kinds = {"state": ("training", "weights"), "sampler": ("sampler", "sampler_weights")}
        out = []
        for s in list(wire.saves) + list(wire.exports):
            if s["kind"] not in kinds and s["kind"] != "external":
                continue
            path = s["path"]
            if not path.startswith(f"tinker://{run}/") or path in wire.deleted:
                continue
            ctype = "external" if s["kind"] == "external" else kinds[s["kind"]][0]
            if path not in wire.expiry:
                ttl = s.get("ttl_seconds")
                wire.expiry[path] = time.time() + ttl if ttl else None
            out.append(
                {
                    "checkpoint_id": path.split("/", 3)[3],
                    "checkpoint_type": ctype,
                    "time": iso(time.time()),
                    "tinker_path": path,
                    "size_bytes": sum(len(v) for v in wire.export_files.values()),
                    "public": False,
                    "expires_at": iso(wire.expiry[path]),
                }
            )
        return out

    def find(run: str, checkpoint_id: str) -> dict[str, Any] | None:
        path = f"tinker://{run}/{checkpoint_id}"
        return next((c for c in named(run) if c["tinker_path"] == path), None)

    async def dispatch(request: Request) -> Response:
        path = request.url.path
        if path.startswith(SIGNED_PREFIX):
            _, _, token, name = path.split("/", 3)
            export = next((e for e in wire.exports if e["token"] == token), None)
            if export is None or export["path"] in wire.deleted or name not in export["files"]:
                return JSONResponse({"detail": "no such signed file"}, status_code=404)
            wire.downloads.append(name)
            return Response(export["files"][name], media_type="application/octet-stream")
        if path == "/api/v1/save_weights_external":
            data = json.loads(await request.body())
            model = wire.models[data["model_id"]]
            out = f"tinker://{model.run}/external_weights/{data['path']}"
            token = wire._id("sig")
            wire.exports.append(
                {
                    "kind": "external",
                    "path": out,
                    "token": token,
                    "ttl_seconds": data.get("ttl_seconds"),
                    "model_id": model.model_id,
                    "files": dict(wire.export_files),
                }
            )
            ready = wire._tick(model)
            return JSONResponse(
                wire.future("save_weights_external", ready, {"type": "save_weights_external", "path": out})
            )
        parts = path[len("/api/v1/training_runs/") :].split("/")
        run = parts[0]
        if len(parts) == 2 and parts[1] == "checkpoints" and request.method == "GET":
            return JSONResponse({"checkpoints": named(run)})
        if len(parts) < 4 or parts[1] != "checkpoints":
            return JSONResponse({"detail": f"not served by the fake: {path}"}, status_code=404)
        checkpoint_id = "/".join(parts[2:4])
        rest = parts[4:]
        found = find(run, checkpoint_id)
        if found is None:
            return JSONResponse({"detail": f"checkpoint {checkpoint_id} not found"}, status_code=404)
        tinker_path = found["tinker_path"]
        if rest == ["ttl"] and request.method == "PUT":
            if wire.dialect == "0.25":
                return JSONResponse({"detail": "Method Not Allowed"}, status_code=405)
            ttl = json.loads(await request.body()).get("ttl_seconds")
            if ttl is not None and not 3600 <= ttl <= 10 * 365 * 86400:
                return JSONResponse({"detail": "ttl_seconds out of range"}, status_code=400)
            wire.ttl_calls.append((tinker_path, ttl))
            wire.expiry[tinker_path] = time.time() + ttl if ttl else None
            return Response(status_code=204)
        if rest == [] and request.method == "DELETE":
            wire.deleted.append(tinker_path)
            return Response(status_code=204)
        if rest == ["external_weights_urls"] and request.method == "GET":
            export = next(e for e in wire.exports if e["path"] == tinker_path)
            base = str(request.base_url).rstrip("/")
            urls = {name: f"{base}{SIGNED_PREFIX}{export['token']}/{name}" for name in export["files"]}
            return JSONResponse({"urls": urls, "expires": iso(time.time() + SIGNED_URL_TTL_S)})
        return JSONResponse({"detail": f"not served by the fake: {request.method} {path}"}, status_code=404)

    return dispatch


class TinkerServer:
    """The fake on a free loopback port, in a daemon thread: `with TinkerServer() as server:`."""

    def __init__(self, wire: TinkerWire | None = None) -> None:
        self.wire = wire or TinkerWire()
        self._loopback = LoopbackServer("fake-tinker", asgi=build_app(self.wire))
        self.port, self.base_url = self._loopback.port, self._loopback.base_url

    def __enter__(self) -> Self:
        self._loopback.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._loopback.stop()


def write_tiny_tokenizer(folder: Any) -> str:
    """A small word-level tokenizer with a chat template, saved as a Hugging Face folder, for
    tests that need `AutoTokenizer.from_pretrained` to work without the real model (ids 0-255)."""
    from pathlib import Path

    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<pad>": 0, "<eos>": 1, "<unk>": 2}
    for i in range(3, 256):
        vocab[f"w{i}"] = i
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>")
    tokenizer.chat_template = "{% for m in messages %}{{ m['content'] }} {% endfor %}"
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(folder)
    return str(folder)
