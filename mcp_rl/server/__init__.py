"""The MCP adapter: tools and resources that delegate to the services. No business logic here."""

from mcp_rl.server.app import build_server
from mcp_rl.server.state import AppState

__all__ = ["AppState", "build_server"]
