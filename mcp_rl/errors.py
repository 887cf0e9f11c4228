"""The errors mcp-rl raises on purpose.

    McpRlError
     ├── UserError          bad input or a state the agent can fix; the message says how
     │    ├── NotFound      an unknown environment, run, test, field, ...
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


class McpRlError(Exception):
    """Base class of every error mcp-rl raises deliberately."""


class UserError(McpRlError, ValueError):
    """The request cannot be done as asked; the message tells the agent what to do instead."""


class NotFound(UserError, LookupError):
    """Something named in the request does not exist."""


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


def clip_message(message: str, limit: int = MESSAGE_LIMIT) -> str:
    """A whole message bounded in length: the start (what failed) and the end (what to do) are kept."""
    if len(message) <= limit:
        return message
    head = limit * 3 // 4
    tail = limit - head
    return f"{message[:head]} [... {len(message) - limit} characters left out ...] {message[-tail:]}"
