"""Small helpers shared by the end-to-end tests that drive the real server through a client."""

from __future__ import annotations

from typing import Any

from mcp import Client

# A run short enough for a 2-core CI machine: 2 steps of 2 groups of 4 answers.
SHORT_RUN = {"total_steps": 2, "batch_size": 8, "group_size": 4}


async def ok(client: Client, tool: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
    """Call a tool that must succeed; return its structured result."""
    result = await client.call_tool(tool, args or {})
    assert not result.is_error, f"{tool}: {result.content[0].text}"
    return result.structured_content
