"""Drives Hermes Agent's own MCP client (tools/mcp_tool.py) against `mcp-rl serve`.

Run by the Python of a virtual environment holding hermes-agent from PyPI (never this
project's), with HERMES_HOME pointing at a folder whose config.yaml is the README's Hermes
configuration. Prints one JSON object per step: {"step": ..., "result": <what Hermes handed
the model, parsed>}. No mcp-rl code is imported here.
"""

from __future__ import annotations

import json
import sys
import time


def main() -> int:
    from tools.mcp_tool import discover_mcp_tools, shutdown_mcp_servers
    from tools.registry import registry

    def emit(step: str, result: object) -> None:
        print(json.dumps({"step": step, "result": result}), flush=True)

    def call(step: str, tool: str, args: dict) -> dict:
        raw = registry.dispatch(f"mcp__rl__{tool}", args)
        parsed = json.loads(raw) if isinstance(raw, str) else raw
        emit(step, parsed)
        return parsed

    try:
        names = discover_mcp_tools()
        emit("discovery", sorted(names))
        # An exploring agent's mistakes first: two "no environment selected" and an unknown run id
        # would be three errors in a row, after which Hermes stops calling the server.
        call("config_before", "rl_get_current_config", {})
        call("config_before", "rl_get_current_config", {})
        call("status_unknown", "rl_check_status", {"run_id": "nope"})
        call("list_runs_after", "rl_list_runs", {})
        call("select", "rl_select_environment", {"name": "arithmetic"})
        call("config", "rl_get_current_config", {})
        call("edit_unknown", "rl_edit_config", {"field": "num_problemz", "value": 3})
        call("edit_range", "rl_edit_config", {"field": "total_steps", "value": -5})
        call("edit_type", "rl_edit_config", {"field": "learning_rate", "value": "fast"})
        call("edit_valid", "rl_edit_config", {"field": "total_steps", "value": 3})
        call("list_runs", "rl_list_runs", {})
        started = call("smoke", "rl_test_inference", {"models": ["local"], "num_steps": 1, "group_size": 2})
        test_id = (started.get("structuredContent") or {}).get("test_id")
        deadline = time.monotonic() + 240
        while test_id and time.monotonic() < deadline:
            got = call("collect", "rl_get_test_result", {"test_id": test_id, "wait_s": 40})
            state = (got.get("structuredContent") or {}).get("state")
            if state and state != "running":
                break
        call("list_tests", "rl_list_tests", {})
    finally:
        shutdown_mcp_servers()
    return 0


if __name__ == "__main__":
    sys.exit(main())
