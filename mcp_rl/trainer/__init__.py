"""The trainer process (`python -m mcp_rl.trainer --config run.yaml`) and its parts.

Kept import-light: the MCP server may import names from here without pulling in torch.
"""
