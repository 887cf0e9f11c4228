"""Drives fastmcp's `Client` (from PyPI, in its own venv) against `mcp-rl serve` over stdio.

Usage: python fastmcp_driver.py COMMAND ENV_JSON. Prints one JSON object per step:
{"step", "is_error", "structured", "text"}. No mcp-rl code is imported here.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time


async def main(command: str, env: dict[str, str]) -> int:
    from fastmcp import Client
    from fastmcp.client.transports import StdioTransport

    async with Client(StdioTransport(command=command, args=["serve"], env=env)) as client:

        def emit(step: str, result: object) -> None:
            print(json.dumps({"step": step, **result}), flush=True)  # type: ignore[dict-item]

        async def call(step: str, tool: str, args: dict) -> dict:
            result = await client.call_tool(tool, args, raise_on_error=False)
            text = "".join(getattr(block, "text", "") or "" for block in result.content)
            out = {"is_error": result.is_error, "structured": result.structured_content, "text": text}
            emit(step, out)
            return out

        tools = await client.list_tools()
        emit("discovery", {"is_error": False, "structured": {"tools": sorted(t.name for t in tools)}, "text": ""})
        await call("select", "rl_select_environment", {"name": "arithmetic"})
        await call("edit_unknown", "rl_edit_config", {"field": "num_problemz", "value": 3})
        await call("edit_range", "rl_edit_config", {"field": "total_steps", "value": -5})
        await call("edit_type", "rl_edit_config", {"field": "learning_rate", "value": "fast"})
        await call("edit_valid", "rl_edit_config", {"field": "total_steps", "value": 3})
        started = await call("smoke", "rl_test_inference", {"models": ["local"], "num_steps": 1, "group_size": 2})
        test_id = (started["structured"] or {}).get("test_id")
        deadline = time.monotonic() + 240
        while test_id and time.monotonic() < deadline:
            got = await call("collect", "rl_get_test_result", {"test_id": test_id, "wait_s": 40})
            if (got["structured"] or {}).get("state") != "running":
                break
        await call("list_runs", "rl_list_runs", {})
        await call("list_tests", "rl_list_tests", {})
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1], json.loads(sys.argv[2]))))
