"""Any MCP server as a training environment (issue 47): a task file names the server, the
scenarios, the reward, the allowed tools and the limits (`taskfile`); the policy sees the tools
(`tools`), its calls run against a fresh server process per episode (`server`), and an episode is
one token-level multi-turn trajectory (`episode`)."""
