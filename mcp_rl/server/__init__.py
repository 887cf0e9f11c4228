"""The MCP adapter: tools and resources that delegate to the services. No business logic here."""

from mcp_rl.server.app import AppState, build_server

__all__ = ["AppState", "build_server"]
