"""The bundled MCP environment (McpEnv) against the real policy server (the local model) and the
tiny stdio MCP server: groups are whole episodes as token-level sequences, tool output masked."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mcp_rl.environments.loader import load_env_class
from mcp_rl.ports import allocate_ports
from mcp_rl.scored_data import MASKED, PROMPT_LOGPROB
from mcp_rl.settings import bundled_environments_dir
from tests.mcp_family.kit import write_task

pytestmark = [pytest.mark.slow, pytest.mark.anyio]


@pytest.fixture(scope="module")
def policy_url(default_model: Path):
    from mcp_rl.trainer.backends.local import LocalBackend
    from mcp_rl.trainer.inference_server import InferenceService, ServerThread, build_app

    backend = LocalBackend(default_model, train=False)
    (port,) = allocate_ports(1)
    server = ServerThread(build_app(InferenceService(backend)), "127.0.0.1", port)
    server.start()
    yield f"http://127.0.0.1:{port}/v1"
    server.stop()


async def test_a_group_is_whole_episodes_with_tool_output_masked(policy_url: str, tmp_path: Path) -> None:
    from atroposlib.envs.base import APIServerConfig

    task_file = write_task(tmp_path, limits="{max_turns: 3, max_tool_calls: 3, max_tokens_per_turn: 24}")
    cls = load_env_class(bundled_environments_dir() / "mcp_env.py", "McpEnv", bundled_environments_dir())
    config, _ = cls.config_init()
    model = os.environ["MCP_RL_MODEL"]
    config = config.model_copy(
        update={"tokenizer_name": model, "group_size": 3, "max_token_length": 1024, "task_file": str(task_file)}
    )
    server = APIServerConfig(
        model_name="policy",
        base_url=policy_url,
        api_key="x",
        server_type="sglang",
        tokenizer_name=model,
        health_check=False,
    )
    env = cls(config, [server])
    await env.setup()
    group, backlog = await env.collect_trajectories(await env.get_next_item())
    assert backlog == [] and group is not None and len(group["tokens"]) == 3
    for tokens, mask, lps in zip(group["tokens"], group["masks"], group["inference_logprobs"], strict=True):
        trained = [i for i, m in enumerate(mask) if m != MASKED]
        assert trained and trained[0] > 0 and len(tokens) == len(mask) == len(lps)
        assert all(mask[i] == tokens[i] and lps[i] <= 0.0 for i in trained)
        assert all(lps[i] == PROMPT_LOGPROB for i, m in enumerate(mask) if m == MASKED)
    assert all(s in (0.0, 1.0) for s in group["scores"])
    metrics = env._counters.drain()
    assert metrics["mcp/episodes"] == 3 and metrics["mcp/dropped_episodes"] == 0
    assert 1.0 <= metrics["mcp/turns_per_episode"] <= 3.0
