"""Smoke tests of an MCP task with hosted models: McpEnv plays its episodes through the OpenAI
`tools` API (Atropos's real OpenAI server class and the openai client, OpenRouter faked at the
wire), every call against the real tiny stdio server, and the report reads tool-call validity,
calls per episode and success from the groups."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from mcp_rl.environments.loader import load_env_class
from mcp_rl.inference_test.models import ModelResult
from mcp_rl.inference_test.report import score_groups, tool_use
from mcp_rl.settings import bundled_environments_dir
from tests.fakes.fake_openrouter import FakeOpenRouter
from tests.mcp_family.kit import write_task

pytestmark = pytest.mark.anyio
MODEL = "fake/good-model"
COUNTRIES = ("France", "Japan", "Peru", "Kenya", "Chile", "Egypt", "Norway", "Canada")


def tool_responder(model: str, body: dict[str, Any], index: int) -> dict[str, Any]:
    """A model that calls `capital` for the country asked (and, for Peru, also a tool that does
    not exist: a malformed call), then answers with what the tool said."""
    messages = body["messages"]
    last = messages[-1]
    if last["role"] == "tool":
        said = [m["content"] for m in messages if m["role"] == "tool" and not m["content"].startswith("Error")]
        return {"content": said[-1] if said else "I do not know"}
    country = next(c for c in COUNTRIES if c in last["content"])
    calls = [
        {
            "id": "call_1",
            "type": "function",
            "function": {"name": "capital", "arguments": json.dumps({"country": country})},
        }
    ]
    if country == "Peru":
        calls.append({"id": "call_2", "type": "function", "function": {"name": "teleport", "arguments": "{}"}})
    return {"content": "", "tool_calls": calls}


def text_responder(model: str, prompt: str, index: int) -> str:
    """The rendered-prompt path: a call in the fallback syntax plus a malformed one, then the answer."""
    if "<tool_response>" in prompt.rsplit("<|im_start|>user", 1)[-1]:
        return "Paris"
    return '<tool_call>{"name": "capital", "arguments": {"country": "France"}}</tool_call><tool_call>{oops</tool_call>'


async def _env(task_file: Path, base_url: str, model_name: str, tokenizer: str, **config: Any) -> Any:
    from atroposlib.envs.base import APIServerConfig

    cls = load_env_class(bundled_environments_dir() / "mcp_env.py", "McpEnv", bundled_environments_dir())
    env_config, _ = cls.config_init()
    env_config = env_config.model_copy(
        update={"tokenizer_name": tokenizer, "group_size": 2, "task_file": str(task_file), **config}
    )
    server = APIServerConfig(
        model_name=model_name, base_url=base_url, api_key="sk-or-test", server_type="openai", health_check=False
    )
    env = cls(env_config, [server])
    await env.setup()
    return env


async def test_a_hosted_model_uses_the_tools_api_and_the_report_reads_its_tool_use(
    tmp_path: Path, tiny_tokenizer: str, default_model: Path
) -> None:
    task_file = write_task(tmp_path, extra="system_prompt: Use the tools.\n")
    with FakeOpenRouter(tool_responder=tool_responder) as fake:
        env = await _env(task_file, fake.base_url, MODEL, tiny_tokenizer)
        assert env._uses_tools_api()
        groups = []
        every = (*env.task.train, *env.task.held_out)
        for scenario in [next(s for s in every if s.answer == answer) for answer in ("Paris", "Lima")]:
            group, _ = await env.collect_trajectories(scenario)
            assert group is not None
            groups.append(dict(group))
        bodies = [r.body for r in fake.completions_for(MODEL)]
    offered = {t["function"]["name"] for t in bodies[0]["tools"]}
    assert "capital" in offered and "wipe" not in offered and "web_search" not in offered
    assert bodies[0]["messages"][0] == {"role": "system", "content": "Use the tools."}
    followups = [b for b in bodies if b["messages"][-1]["role"] == "tool"]
    assert followups and all(re.match(r"call_\d", b["messages"][-1]["tool_call_id"]) for b in followups)
    assert any("no tool 'teleport'" in m["content"] for b in followups for m in b["messages"] if m["role"] == "tool")
    # 2 episodes of France (1 call each), 2 of Peru (2 calls each, one malformed): all answered right.
    use = tool_use(groups)
    assert use == {
        "episodes": 4,
        "tool_calls_per_episode": 1.5,
        "tool_call_validity": round(1 - 2 / 6, 4),
        "tool_errors_per_episode": 0.0,
        "answered": 1.0,
        "success": 1.0,
    }
    result = score_groups(ModelResult(model=MODEL, name=MODEL, scale="?", provider="openrouter", slug="m"), groups)
    assert result.tool_use == use and result.accuracy == 1.0
    # (in the same event loop: Atropos's clients outlive an environment)
    local = await _env(task_file, "http://127.0.0.1:9/v1", "local", tiny_tokenizer)
    assert not local._uses_tools_api()  # the local model has no tool API: the rendered fallback prompt
    forced = await _env(task_file, "http://127.0.0.1:9/v1", "local", tiny_tokenizer, tool_api="tools")
    assert forced._uses_tools_api()
    # The rendered-prompt path (the local model's in smoke tests) reports its tool use the same way.
    with FakeOpenRouter(responder=text_responder) as fake:
        text = await _env(task_file, fake.base_url, MODEL, str(default_model), tool_api="text")
        assert not text._uses_tools_api()
        france = next(s for s in (*text.task.train, *text.task.held_out) if s.answer == "Paris")
        group, _ = await text.collect_trajectories(france)
        assert "<tool_call>" not in json.dumps(fake.completions_for(MODEL)[0].body.get("tools"))
    assert group is not None
    assert tool_use([dict(group)]) == {
        "episodes": 2,
        "tool_calls_per_episode": 2.0,
        "tool_call_validity": 0.5,
        "tool_errors_per_episode": 0.0,
        "answered": 1.0,
        "success": 1.0,
    }
