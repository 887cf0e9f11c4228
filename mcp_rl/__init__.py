"""mcp-rl: an MCP server that runs RL post-training of language models for AI agents."""

__version__ = "0.1.0"
__all__ = ["__version__"]
