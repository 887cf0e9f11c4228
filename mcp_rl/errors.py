"""The errors mcp-rl raises on purpose.

    McpRlError
     ├── UserError          bad input or a state the agent can fix; the message says how
     │    └── NotFound      an unknown environment, run, test, field, ...
     └── LaunchError        a process did not come up (which, why, the log tail)

Services raise these; only the MCP adapter (mcp_rl.server) turns them into tool errors.
"""

from __future__ import annotations


class McpRlError(Exception):
    """Base class of every error mcp-rl raises deliberately."""


class UserError(McpRlError, ValueError):
    """The request cannot be done as asked; the message tells the agent what to do instead."""


class NotFound(UserError, LookupError):
    """Something named in the request does not exist."""


class LaunchError(McpRlError, RuntimeError):
    """A supervised process failed to start or to become ready."""
