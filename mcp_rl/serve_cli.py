"""`mcp-rl serve-model RUN_ID [--step N] [--detach]`: a run's saved checkpoint as a model to use.

Local runs: base + the checkpoint's LoRA adapter served on 127.0.0.1 behind the OpenAI API
(/v1/chat/completions, /v1/completions, with logprobs). It prints the base URL and the model
name to give any OpenAI client, then serves until Ctrl-C; with --detach it keeps serving in
the background, recorded in the state directory (`--list`, `--stop SERVE_ID`). Tinker runs:
Tinker serves its checkpoints itself; this prints its OpenAI-compatible endpoint and the
checkpoint's sampler path (the model name there).
"""

from __future__ import annotations

import json
import signal
import threading
import time
from typing import Any

from mcp_rl.errors import UserError
from mcp_rl.evaluation import serving
from mcp_rl.run_checkpoints import TINKER_OPENAI_BASE_URL, resolve_checkpoint
from mcp_rl.settings import Settings


def cmd_serve(settings: Settings, args: Any) -> int:
    if args.list:
        return _list(settings, args.json)
    if args.stop:
        return _stop(settings, args.stop, args.json)
    if not args.run_id:
        raise UserError("Give a RUN_ID to serve (mcp-rl runs list), or --list / --stop SERVE_ID.")
    ref = resolve_checkpoint(settings, args.run_id, args.step)
    if ref.backend == "tinker":
        return _emit(
            args.json,
            {
                "model": ref.weights,
                "base_url": TINKER_OPENAI_BASE_URL,
                "note": "Tinker serves this checkpoint itself; authenticate with your TINKER_API_KEY.",
                "run_id": ref.run_id,
                "step": ref.step,
            },
        )
    began = time.monotonic()
    record = serving.start(settings, ref, port=args.port)
    stopping = threading.Event()
    if not args.detach:
        # Ctrl-C or SIGTERM while loading or serving: stop the server, then exit.
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stopping.set())
    try:
        deadline = time.monotonic() + serving.DEFAULT_READY_TIMEOUT_S
        while not serving.check_ready(record):
            if stopping.is_set():
                return 130
            if time.monotonic() > deadline:
                raise serving.ServeError(f"the model server was not ready in time:\n{serving.log_tail(record)}")
            stopping.wait(0.2)
        _emit(
            args.json,
            {
                "model": record.model,
                "base_url": record.base_url,
                "serve_id": record.serve_id,
                "startup_s": round(time.monotonic() - began, 1),
                "detached": bool(args.detach),
                "stop_with": f"mcp-rl serve-model --stop {record.serve_id}" if args.detach else "Ctrl-C",
            },
        )
        if args.detach:
            return 0
        while not stopping.wait(1.0):
            if not serving.alive(record):
                print(f"the model server exited:\n{serving.log_tail(record)}", flush=True)
                return 1
        return 0
    finally:
        if not args.detach or not serving.alive(record):
            serving.stop_served(record)


def _emit(as_json: bool, fields: dict[str, Any]) -> int:
    if as_json:
        print(json.dumps(fields), flush=True)
    else:
        for key, value in fields.items():
            if value not in (None, ""):  # an empty `note:` line says nothing
                print(f"{key}: {value}", flush=True)
    return 0


def _list(settings: Settings, as_json: bool) -> int:
    records = serving.list_served(settings)
    if as_json:
        print(json.dumps([serving.describe(r) for r in records]))
    elif not records:
        print("no served models")
    else:
        for r in records:
            print(f"{r.serve_id}  {r.model}  {r.base_url}  pid {r.pid}")
    return 0


def _stop(settings: Settings, serve_id: str, as_json: bool) -> int:
    record = serving.load(settings, serve_id)
    ended = serving.stop_served(record)
    fields = {"serve_id": serve_id, "stopped": ended.proven and not ended.left, "note": ended.note}
    return _emit(as_json, fields) if fields["stopped"] else (_emit(as_json, fields) or 1)
