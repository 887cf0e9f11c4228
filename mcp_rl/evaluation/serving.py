"""A run's saved checkpoint served as a model: base + its LoRA adapter on 127.0.0.1, behind the
project's OpenAI-compatible server (`mcp_rl.trainer.serve_model --adapter`).

Each served model lives in `served/<serve_id>/` of the state directory:

    served.json   ServedRecord: what is served, where, and the server's pid + start time + marker
    server.log    the server's output

A served model is one of our processes like a run's: it carries the marker
`served:<its folder>` (inherited by anything it starts), and is signalled only when its pid,
start time and marker all prove it ours (`mcp_rl.processes.stop`). A record whose process has
ended is stale and removed when the served models are listed. No secret reaches the server:
it needs none.
"""

from __future__ import annotations

import json
import secrets
import shutil
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from pydantic import BaseModel

from mcp_rl.atomic import write_text_atomic
from mcp_rl.errors import McpRlError, NotFound, UserError, clip_id
from mcp_rl.models import resolve_model
from mcp_rl.ports import allocate_ports, port_is_free
from mcp_rl.processes import Ended, identify, is_alive, marker_for, spawn, stop
from mcp_rl.run_checkpoints import CheckpointRef
from mcp_rl.settings import SECRET_ENV_VARS, Settings

SERVED_DIR = "served"
RECORD_FILE = "served.json"
LOG_FILE = "server.log"
STOP_GRACE_S = 5.0
# Loading the model and merging the adapter: ~5-10 s on 2 cores for the embedded model.
DEFAULT_READY_TIMEOUT_S = 180.0
_SERVE_ID_CHARS = "abcdefghijklmnopqrstuvwxyz0123456789-"


class ServeError(McpRlError):
    """A served model's server did not come up (its log tail says why)."""


class ServedRecord(BaseModel):
    """served.json: one served checkpoint and the process serving it."""

    serve_id: str
    model: str  # the name the server answers to: run:<run_id>@<step>
    run_id: str
    step: int
    base_model: str  # the local base model folder
    adapter: str  # the checkpoint's PEFT adapter folder
    port: int
    base_url: str  # give this and `model` to any OpenAI client
    pid: int
    pgid: int
    create_time: float
    marker: str
    started_at: float
    log_file: str


def served_root(settings: Settings) -> Path:
    return settings.home / SERVED_DIR


def new_serve_id(ref: CheckpointRef) -> str:
    return f"{ref.run_id}-{ref.step}-{secrets.token_hex(2)}"


def server_env(settings: Settings) -> dict[str, str]:
    """The server's environment: ours without any secret (it calls no paid service)."""
    env = settings.child_env()
    for name in (*SECRET_ENV_VARS, "OPENAI_API_KEY"):
        env.pop(name, None)
    return env


def server_argv(base_model: Path, adapter: str, port: int, served_name: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "mcp_rl.trainer.serve_model",
        "--model",
        str(base_model),
        "--adapter",
        adapter,
        "--port",
        str(port),
        "--served-name",
        served_name,
    ]


def start(settings: Settings, ref: CheckpointRef, port: int | None = None) -> ServedRecord:
    """Start serving a local run's checkpoint in the background (returns at once; see `wait_ready`).

    Raises:
        UserError: a Tinker run (Tinker serves its own checkpoints), or the base model is missing.
    """
    if ref.backend != "local":
        raise UserError(
            f"Run {ref.run_id} trained on Tinker: its checkpoint {ref.weights} is served by Tinker itself "
            "(its OpenAI-compatible endpoint takes that path as the model name); nothing to start here."
        )
    if port is not None and not (1 <= port <= 65535 and port_is_free(port)):
        # Checked before the model loads (that takes half a minute), not found after it.
        raise UserError(
            f"port {port} is not free on 127.0.0.1 (another server holds it, or it is out of range): choose "
            "another --port, or leave --port out for a free one"
        )
    base = resolve_model(settings, ref.base_model)
    (port,) = [port] if port else allocate_ports(1)
    serve_id = new_serve_id(ref)
    folder = served_root(settings) / serve_id
    folder.mkdir(parents=True)
    marker = marker_for("served", folder)
    log_path = folder / LOG_FILE
    proc = spawn(server_argv(base, ref.weights, port, ref.model_id), log_path, server_env(settings), marker=marker)
    ident = identify(proc.pid)
    record = ServedRecord(
        serve_id=serve_id,
        model=ref.model_id,
        run_id=ref.run_id,
        step=ref.step,
        base_model=str(base),
        adapter=ref.weights,
        port=port,
        base_url=f"http://127.0.0.1:{port}/v1",
        pid=proc.pid,
        pgid=proc.pid,
        create_time=ident.create_time if ident else 0.0,
        marker=marker,
        started_at=time.time(),
        log_file=str(log_path),
    )
    write_text_atomic(folder / RECORD_FILE, record.model_dump_json(indent=2))
    # The caller's Popen reaps the child; a detached server outlives it and is reaped by init.
    record_popen(record.serve_id, proc)
    return record


_POPENS: dict[str, object] = {}


def record_popen(serve_id: str, proc: object) -> None:
    """Keep the Popen of a server we started, so its exit code is collected (no zombie)."""
    _POPENS[serve_id] = proc


def health(record: ServedRecord, timeout_s: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{record.port}/health", timeout=timeout_s) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def alive(record: ServedRecord) -> bool:
    proc = _POPENS.get(record.serve_id)
    poll = getattr(proc, "poll", None)
    if poll is not None and poll() is not None:
        return False
    return is_alive(record.pid, record.create_time)


def check_ready(record: ServedRecord) -> bool:
    """One probe: True once the server answers; ServeError (with its log tail) once it has died."""
    if health(record):
        return True
    if not alive(record):
        raise ServeError(f"the model server for {record.model} exited before it was ready:\n{log_tail(record)}")
    return False


def wait_ready(record: ServedRecord, timeout_s: float = DEFAULT_READY_TIMEOUT_S) -> float:
    """Block until the server answers /health; returns the seconds waited.

    Raises:
        ServeError: it exited or missed the deadline (then it is stopped).
    """
    began = time.monotonic()
    deadline = began + timeout_s
    while not check_ready(record):
        if time.monotonic() > deadline:
            stop_served(record)
            raise ServeError(
                f"the model server for {record.model} was not ready in {timeout_s:.0f} s:\n{log_tail(record)}"
            )
        time.sleep(0.2)  # polling another process's readiness, with a deadline
    return time.monotonic() - began


def log_tail(record: ServedRecord, lines: int = 15) -> str:
    try:
        text = Path(record.log_file).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


def stop_served(record: ServedRecord, *, remove: bool = True) -> Ended:
    """Stop a served model, only if pid + start time + marker prove it ours; remove its folder
    once nothing of it is left (a process that cannot be proven ours is left alone, and said)."""
    ended = stop(record.pid, record.pgid, record.create_time, record.marker, STOP_GRACE_S)
    proc = _POPENS.pop(record.serve_id, None)
    wait = getattr(proc, "wait", None)
    if wait is not None:
        try:
            wait(timeout=5)
        except Exception:
            pass
    if remove and ended.proven and not ended.left:
        shutil.rmtree(served_root_of(record), ignore_errors=True)
    return ended


def served_root_of(record: ServedRecord) -> Path:
    return Path(record.log_file).parent


def load(settings: Settings, serve_id: str) -> ServedRecord:
    """Raises NotFound (listing what is served) for an unknown id."""
    if not serve_id or any(c not in _SERVE_ID_CHARS + "ABCDEFGHIJKLMNOPQRSTUVWXYZ_" for c in serve_id):
        raise NotFound(f"Unknown served model {clip_id(serve_id)!r}.")
    path = served_root(settings) / serve_id / RECORD_FILE
    try:
        return ServedRecord.model_validate_json(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        known = ", ".join(r.serve_id for r in list_served(settings)) or "none"
        raise NotFound(f"Unknown served model {clip_id(serve_id)!r}. Served now: {known}.") from None


def list_served(settings: Settings) -> list[ServedRecord]:
    """The served models still running; stale records (process ended) are removed."""
    root = served_root(settings)
    found: list[ServedRecord] = []
    if not root.is_dir():
        return found
    for folder in sorted(root.iterdir()):
        path = folder / RECORD_FILE
        try:
            record = ServedRecord.model_validate_json(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if alive(record):
            found.append(record)
        else:
            shutil.rmtree(folder, ignore_errors=True)
    return found


def describe(record: ServedRecord) -> dict[str, object]:
    return json.loads(record.model_dump_json())
