"""Every request over stdio gets an answer, even one the SDK cannot parse.

The SDK's stdio transport parses each line with `mcp_types.jsonrpc_message_adapter`; a line it
cannot parse (nested 100,000 deep, a lone surrogate, not JSON) goes to its dispatcher as an
exception, which only logs it: the client waits for an answer that never comes. The guard sits
in front of the transport: a thread reads the real standard input line by line, parses each line
with the same adapter, passes a good line on unchanged and replaces a bad one by a request for
`PARSE_ERROR_METHOD` with the same id (found in the line's first bytes), which the server answers
with a JSON-RPC parse error (-32700) saying why (RlServer routes it). A bad line with no id to
answer to is logged on stderr, as JSON-RPC has no way to answer it through the SDK.

No private part of the SDK is used: the transport reads file descriptor 0, which becomes the
guard's pipe.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading

import mcp_types
from mcp.types import RequestParams
from pydantic import ValidationError

log = logging.getLogger(__name__)

PARSE_ERROR_METHOD = "mcp-rl/unparseable-request"
# Where a request's id is looked for: its first bytes (the id comes before any deep params).
ID_PROBE_BYTES = 4096
_ID = re.compile(r'"id"\s*:\s*(-?\d{1,18}|"(?:[^"\\]|\\.){0,200}")')


class UnparseableParams(RequestParams):
    reason: str = ""


def _reason(exc: Exception) -> str:
    if isinstance(exc, ValidationError) and exc.errors():
        first = exc.errors()[0]
        return str(first.get("msg", exc))[:200]
    return f"{type(exc).__name__}: {exc}"[:200]


def guarded(line: bytes) -> bytes | None:
    """`line` itself when the SDK can parse it; else a request for PARSE_ERROR_METHOD with its id
    and the reason; None when it has no id to answer to."""
    text = line.decode("utf-8", errors="replace")  # as the SDK's reader decodes it
    if not text.strip():
        return line
    try:
        mcp_types.jsonrpc_message_adapter.validate_json(text, by_name=False)
        return line
    except Exception as exc:  # anything the SDK's parse would raise
        reason = _reason(exc)
    match = _ID.search(text[:ID_PROBE_BYTES])
    request_id: object = None
    if match is not None:
        try:
            request_id = json.loads(match.group(1))
        except ValueError:
            request_id = None
    if not isinstance(request_id, int | str):
        log.warning("a message that is not JSON-RPC and has no id to answer to was ignored: %s", reason)
        return None
    request = {"jsonrpc": "2.0", "id": request_id, "method": PARSE_ERROR_METHOD, "params": {"reason": reason}}
    return (json.dumps(request) + "\n").encode("utf-8")


def _pump(source_fd: int, sink_fd: int) -> None:
    try:
        with os.fdopen(source_fd, "rb") as source, os.fdopen(sink_fd, "wb") as sink:
            for line in source:
                out = guarded(line)
                if out is not None:
                    sink.write(out)
                    sink.flush()
    except (BrokenPipeError, ValueError, OSError):
        pass  # the server stopped reading: nothing more to pass on


def guard_stdin() -> None:
    """Put the guard between the real standard input and whatever reads file descriptor 0."""
    real = os.dup(0)
    read_end, write_end = os.pipe()
    os.dup2(read_end, 0)
    os.close(read_end)
    threading.Thread(target=_pump, args=(real, write_end), name="mcp-rl-stdin-guard", daemon=True).start()
