"""Runs: the registry in state.db, the detached per-run supervisor, and the service the tools call.

The supervisor is its own program (`python -m mcp_rl.supervisor --run-dir DIR`); the MCP server
and the CLI use `mcp_rl.supervisor.service`. Beside the registry, its readers: a run's results
(results), its rollouts a page at a time (rollouts), and what changed since the last look
(changes).
"""
