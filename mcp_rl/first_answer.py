"""The first answer of `mcp-rl serve` over stdio, sent before the MCP SDK is even imported.

Claude Code 2.1.332 opens a stdio server with `server/discover` (protocol 2026-07-28) and waits 3 s
for the answer before it falls back to `initialize`. The SDK's own answer comes only once the SDK
is imported and the server built: ~0.4 s here, ~1.1 s without cached bytecode (a first start, an
install that compiles none, PYTHONDONTWRITEBYTECODE), and 4-12 s of that on a busy 2-core
machine, measured (bench/bench_discover.py). The answer itself is fixed by the code: what the
server is and can do (serverInfo, capabilities, instructions, versions). So a start keeps the
answer its SDK server gives (`RlServer.discover_result`, kept once the surface is registered, off
the first answers' path, in `<cache_dir>/discover-answer.json`, keyed by the Python version and
the stamps of mcp_rl's and the SDK's files, as the tool catalog is), and the next start sends it
from here, the SDK still loading behind it. A first start (nothing kept) is answered by the SDK.

How, with the standard library only: at the very start fd 0 is swapped for a pipe that a relay
thread fills from the host's pipe. The first line the host sends is looked at: a well-formed
2026-07-28 `server/discover` gets the kept answer on a copy of fd 1 (taken before the SDK points
fd 1 elsewhere), and is not passed on; anything else (`initialize`, another version, no kept
answer yet) is passed on untouched, as is everything after it, which is relayed only once the
first answer is written (so no answer of the SDK can come before it). The SDK reads the pipe as
it would have read the host's: end of input is passed on too. A 2026-07-28 connection is
stateless, so the SDK serving the requests after an answered `server/discover` is what the host
expects; the SDK takes the era from the first request it sees (the next one carries the same
envelope).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sys
import threading
from importlib.util import find_spec
from pathlib import Path
from typing import Any, NamedTuple

log = logging.getLogger(__name__)

FILE_NAME = "discover-answer.json"
FORMAT = 1
PROTOCOL_VERSION_KEY = "io.modelcontextprotocol/protocolVersion"
CLIENT_CAPABILITIES_KEY = "io.modelcontextprotocol/clientCapabilities"
CLIENT_INFO_KEY = "io.modelcontextprotocol/clientInfo"
# The SDK's files that build and shape the answer (the rest of the SDK changes with them: an
# upgrade rewrites them all).
SDK_FILES = (("mcp", "server/lowlevel/server.py"), ("mcp", "server/runner.py"), ("mcp_types", "__init__.py"))
CHUNK = 65536


def code_key() -> str:
    """Changes whenever the kept answer may: Python, the SDK's files, every module of mcp_rl."""
    parts = [str(FORMAT), sys.version]
    for package, relative in SDK_FILES:
        spec = find_spec(package)  # a top-level package: found, not imported
        folders = list(spec.submodule_search_locations or []) if spec is not None else []
        parts.append(_stamp(Path(folders[0]) / relative) if folders else "-")
    root = Path(__file__).resolve().parent
    for path in sorted(root.rglob("*.py")):
        parts.append(f"{path.relative_to(root)} {_stamp(path)}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def _stamp(path: Path) -> str:
    try:
        st = path.stat()
    except OSError:
        return "?"
    return f"{st.st_size}:{st.st_mtime_ns}"


class Kept(NamedTuple):
    """A kept `server/discover` answer: the protocol version it is for, and the result."""

    version: str
    result: dict[str, Any]


def read_kept(path: Path, key: str) -> Kept | None:
    """The kept answer, or None (none, damaged, or made by other code)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("key") != key:
        return None
    version, result = data.get("version"), data.get("result")
    return Kept(version, result) if isinstance(version, str) and isinstance(result, dict) else None


def keep(path: Path, key: str, kept: Kept) -> None:
    """Keep the answer for the next start (unchanged: not rewritten; a read-only home: not kept)."""
    if read_kept(path, key) == kept:
        return
    # here, not at the top: the first answer's path stays the standard library's alone
    from mcp_rl.atomic import write_text_atomic

    try:
        write_text_atomic(path, json.dumps({"key": key, "version": kept.version, "result": kept.result}))
    except OSError as exc:
        log.debug("could not keep the server/discover answer: %r", exc)


def answerable(message: Any, version: str) -> bool:
    """A `server/discover` the kept answer for `version` answers exactly as the SDK would: a
    request with an id, at that version, with the envelope's capabilities (and client info, if
    any) shaped as the spec says. Anything else is the SDK's to answer (or to refuse)."""
    if not isinstance(message, dict) or message.get("jsonrpc") != "2.0" or message.get("method") != "server/discover":
        return False
    request_id = message.get("id")
    if isinstance(request_id, bool) or not isinstance(request_id, str | int):
        return False
    params = message.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    if not isinstance(meta, dict):
        return False
    info = meta.get(CLIENT_INFO_KEY)
    return (
        meta.get(PROTOCOL_VERSION_KEY) == version
        and isinstance(meta.get(CLIENT_CAPABILITIES_KEY), dict)
        and (
            info is None
            or (isinstance(info, dict) and isinstance(info.get("name"), str) and isinstance(info.get("version"), str))
        )
    )


class FirstAnswer:
    """The relay in front of the SDK's stdin (see the module docstring), answering the first line
    from the answer kept at `kept_at` under `key`. Made first thing in `mcp-rl serve`; `keep` the
    SDK server's own answer once it is built."""

    def __init__(self, kept_at: Path, key: str) -> None:
        self._kept_at, self._key = kept_at, key
        self._host_in = os.dup(0)
        self._host_out = os.dup(1)  # the host's pipe: fd 1 is the SDK's to redirect
        read_end, self._sink = os.pipe()
        os.dup2(read_end, 0)
        os.close(read_end)
        threading.Thread(target=self._relay, name="first-answer", daemon=True).start()

    def _relay(self) -> None:
        try:
            pending = bytearray()
            while b"\n" not in pending:
                chunk = os.read(self._host_in, CHUNK)
                if not chunk:
                    break
                pending += chunk
            line, newline, rest = bytes(pending).partition(b"\n")
            if not (newline and self._answer(line)):
                _write_all(self._sink, line + newline)
            _write_all(self._sink, rest)
            while chunk := os.read(self._host_in, CHUNK):
                _write_all(self._sink, chunk)
        except OSError as exc:  # the SDK closed its end (it exits): nothing left to pass on
            log.debug("stdin relay ended: %r", exc)
        finally:
            os.close(self._sink)  # end of input for the SDK

    def _answer(self, line: bytes) -> bool:
        try:
            message = json.loads(line)
        except ValueError:
            return False
        if not isinstance(message, dict) or message.get("method") != "server/discover":
            return False  # initialize and the rest: straight to the SDK
        kept = read_kept(self._kept_at, self._key)
        if kept is None or not answerable(message, kept.version):
            return False
        answer = json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": kept.result}, separators=(",", ":"))
        _write_all(self._host_out, answer.encode() + b"\n")
        log.info("server/discover answered from the kept answer, before the MCP SDK was loaded")
        return True


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
