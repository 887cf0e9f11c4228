"""The one scrubber: every secret value this process holds, removed from text that leaves it.

User code gets no key of ours unless it names one (`Settings.user_code_env`), but a key it named,
or one it found elsewhere, may still come back in an exception, a log line or a report; and a
service may echo a key in an error. So text is scrubbed where it leaves a process: tool answers
(`RlServer.call_tool`), validation reports, the registry's causes (`state.db`), the trainer's
status file, supervisor.log and the log tails rl_read_log returns.

A `Settings` teaches this module its secrets when it is built (`learn`); each is known in the
forms it is commonly echoed in: as it is, without its well-known prefix (`hf_`, `sk-or-v1-`, ...),
base64 (standard and URL-safe, with or without padding, also inside a longer encoded text such
as `user:key`), and URL-encoded. Each is replaced by `[redacted NAME]`. Stdlib only: any layer may
use it.
"""

from __future__ import annotations

import base64
import io
import logging
import re
import sys
import threading
import urllib.parse
from typing import Any, TextIO

# Prefixes services put before the random part of a key; the part alone is scrubbed too.
KNOWN_PREFIXES = ("sk-or-v1-", "sk-or-", "sk-proj-", "sk-ant-", "sk-", "hf_", "tml-", "wandb_v1_", "local-")
# Shorter values are not scrubbed (a 3-letter "key" would blank out ordinary words); its forms
# (without prefix, base64 cores) must be at least this long too.
MIN_SECRET_CHARS = 8

_lock = threading.Lock()
_known: dict[str, str] = {}  # value -> name
_pattern: re.Pattern[str] | None = None
_by_form: dict[str, str] = {}  # form -> name


def _b64_cores(raw: bytes) -> set[str]:
    """Base64 text that appears in the encoding of any text containing `raw`, at each of the
    three byte alignments (the characters that depend only on `raw`), standard and URL-safe."""
    cores: set[str] = set()
    for offset in range(3):
        encoded = base64.b64encode(b"\0" * offset + raw).decode()
        start = 4 if offset else 0  # the first group mixes in bytes before `raw`
        end = ((offset + len(raw)) // 3) * 4  # a last partial group mixes in bytes after it
        core = encoded[start:end]
        if offset == 0:
            cores.add(encoded)  # the whole encoding, padding included
            cores.add(encoded.rstrip("="))
        cores.add(core)
    return {c for c in cores | {c.replace("+", "-").replace("/", "_") for c in cores} if len(c) >= MIN_SECRET_CHARS}


def forms(value: str) -> set[str]:
    """The forms of one secret value that are scrubbed."""
    found = {value}
    for prefix in KNOWN_PREFIXES:
        if value.startswith(prefix) and len(value) - len(prefix) >= MIN_SECRET_CHARS:
            found.add(value[len(prefix) :])
            break
    for text in list(found):
        raw = text.encode()
        found |= _b64_cores(raw)
        found.add(urllib.parse.quote(text, safe=""))
        found.add(urllib.parse.quote_plus(text))
    return {f for f in found if len(f) >= MIN_SECRET_CHARS}


def learn(name: str, value: str | None) -> None:
    """Know `value` (the secret from variable `name`) from now on, in this process."""
    global _pattern
    if not value or len(value) < MIN_SECRET_CHARS:
        return
    with _lock:
        if _known.get(value) == name:
            return
        _known[value] = name
        for form in forms(value):
            _by_form.setdefault(form, name)
        # Longest first: a form that contains another is replaced whole.
        ordered = sorted(_by_form, key=len, reverse=True)
        _pattern = re.compile("|".join(re.escape(f) for f in ordered))


def scrub(text: str) -> str:
    """`text` with every known secret (in any of its forms) replaced by `[redacted NAME]`."""
    pattern = _pattern
    if pattern is None or not text:
        return text
    return pattern.sub(lambda m: f"[redacted {_by_form.get(m.group(0), 'secret')}]", text)


def scrub_json(value: Any) -> Any:
    """A JSON-like value (dicts, lists, strings) with every string scrubbed (keys too)."""
    if _pattern is None:
        return value
    if isinstance(value, str):
        return scrub(value)
    if isinstance(value, dict):
        return {scrub(k) if isinstance(k, str) else k: scrub_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [scrub_json(v) for v in value]
    return value


def has_secret(text: str) -> bool:
    pattern = _pattern
    return bool(pattern is not None and text and pattern.search(text))


class ScrubbedStream(io.TextIOBase):
    """A text stream that scrubs what is written to it, line by line (a key split across two
    writes of one line is still found), before passing it on."""

    def __init__(self, inner: TextIO) -> None:
        self._inner = inner
        self._pending = ""

    def write(self, text: str) -> int:
        self._pending += text
        if "\n" in self._pending:
            whole, self._pending = self._pending.rsplit("\n", 1)
            self._inner.write(scrub(whole + "\n"))
        elif len(self._pending) > 65536:  # no newline for long: pass it on anyway
            self._inner.write(scrub(self._pending))
            self._pending = ""
        return len(text)

    def flush(self) -> None:
        if self._pending:
            self._inner.write(scrub(self._pending))
            self._pending = ""
        self._inner.flush()

    def fileno(self) -> int:
        return self._inner.fileno()

    def isatty(self) -> bool:
        return False

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self._inner, "encoding", "utf-8")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)  # buffer, reconfigure, ...: the wrapped stream's


def scrub_std_streams() -> None:
    """Scrub what this process writes through sys.stdout and sys.stderr (prints, logging,
    tracebacks). Writes to the file descriptors themselves (C code, child processes) pass as
    they are: a process that runs user code holds only the keys its task named."""
    if not isinstance(sys.stdout, ScrubbedStream):
        sys.stdout = ScrubbedStream(sys.stdout)
    if not isinstance(sys.stderr, ScrubbedStream):
        sys.stderr = ScrubbedStream(sys.stderr)


class ScrubFilter(logging.Filter):
    """A logging filter (on a handler) that scrubs each record's message and traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        if _pattern is None:
            return True
        message = record.getMessage()
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        record.msg, record.args = scrub(message), None
        if record.exc_text:
            record.exc_text = scrub(record.exc_text)
        if record.stack_info:
            record.stack_info = scrub(record.stack_info)
        return True


def install_log_filter(logger: logging.Logger | None = None) -> None:
    """Scrub every record the handlers of `logger` (default: the root logger) write."""
    target = logger or logging.getLogger()
    for handler in target.handlers:
        if not any(isinstance(f, ScrubFilter) for f in handler.filters):
            handler.addFilter(ScrubFilter())
