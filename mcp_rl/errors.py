"""The errors mcp-rl raises on purpose.

    McpRlError
     ├── UserError          bad input or a state the agent can fix; the message says how
     │    ├── NotFound      an unknown environment, run, test, field, ...
     │    ├── Exploring     what an agent meets while finding its way: answered, not a tool error
     │    │    ├── NotSelected  no environment selected yet
     │    │    └── UnknownId    an unknown run, test, evaluation or export id (also a NotFound)
     │    └── DamagedState  a file of the state directory is unreadable; kept aside, never lost
     └── LaunchError        a process did not come up (which, why, the log tail)

Services raise these; only the MCP adapter (mcp_rl.server) turns them into tool errors.
"""

from __future__ import annotations

from typing import Any

# Inputs echoed in a message are cut to this many characters: a 1 MB value must not come back
# as a 1 MB error (the agent pays for every token of it).
ECHO_LIMIT = 120
# No message is longer than this, whatever went into it (a safety net for the adapters).
MESSAGE_LIMIT = 4000
# An id (run, test, evaluation, export, ...) echoed back is cut to this many characters: real ids
# are under 64; a 1 MB one must not come back whole.
ID_ECHO_LIMIT = 100


class McpRlError(Exception):
    """Base class of every error mcp-rl raises deliberately."""


class UserError(McpRlError, ValueError):
    """The request cannot be done as asked; the message tells the agent what to do instead."""


class NotFound(UserError, LookupError):
    """Something named in the request does not exist."""


class Exploring(UserError):
    """Something an agent meets while it finds its way, before it knows what exists: no environment
    selected yet, an id it guessed. The MCP adapter answers it as a normal result (saying what
    exists), not as a tool error: hosts count errors (Hermes cuts a server off after three in a
    row), and these are the agent's first steps, not anything broken."""

    kind = "environment"

    def __init__(self, message: str, value: str | None = None) -> None:
        super().__init__(message)
        self.value = value


class NotSelected(Exploring):
    """No environment is selected yet."""


class UnknownId(Exploring, NotFound):
    """No run, test, evaluation or export has this id (`kind`: run_id, test_id, eval_id, export_id)."""

    def __init__(self, message: str, kind: str, value: str) -> None:
        if isinstance(value, str) and len(value) > ID_ECHO_LIMIT:
            # Whoever wrote the message, the id in it is clipped (every tool echoing an id).
            message = message.replace(repr(value), repr(clip_id(value))).replace(value, clip_id(value))
        super().__init__(message, value[:64] if isinstance(value, str) else None)
        self.kind = kind


class DamagedState(UserError):
    """A file of the state directory cannot be read as what it should be (garbage, truncated, a
    directory, wrong types). The message says which file, why, where the damaged copy was kept
    and what to do; nothing is deleted."""


class LaunchError(McpRlError, RuntimeError):
    """A supervised process failed to start or to become ready."""


def clip(value: Any, limit: int = ECHO_LIMIT) -> str:
    """`repr(value)` cut to `limit` characters, saying how much was left out."""
    text = repr(value)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text) - limit} more characters)"


def clip_id(value: object, limit: int = ID_ECHO_LIMIT) -> str:
    """An id as text for a message, cut to `limit` characters with an ellipsis."""
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= limit else f"{text[:limit]}…"


def clip_message(message: str, limit: int = MESSAGE_LIMIT) -> str:
    """A whole message bounded in length: the start (what failed) and the end (what to do) are kept."""
    if len(message) <= limit:
        return message
    head = limit * 3 // 4
    tail = limit - head
    return f"{message[:head]} [... {len(message) - limit} characters left out ...] {message[-tail:]}"
