"""One episode of a hosted model through the OpenAI `tools` API (smoke tests of an MCP task with
OpenRouter models): the model gets the offered tools as `tools` and answers with `tool_calls`,
each run against the real server and answered with a `tool` message; the episode ends on a reply
without a call or a limit, as a token-level episode does (`episode.play`).

A call whose arguments are not a JSON object, or that names a tool not offered, is malformed: it
is answered with an error `tool` message and counted (the model's tool-call validity). No token
is trained on this path: it measures a model, it does not make a trajectory to train on.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio

from mcp_rl.environments.mcp_family.episode import EndReason, Tools, Trajectory
from mcp_rl.environments.mcp_family.server import open_server
from mcp_rl.environments.mcp_family.taskfile import McpTask, Scenario


@dataclass(frozen=True)
class ChatTurn:
    """A model's reply: its text and its tool calls as (id, name, arguments as JSON text)."""

    content: str
    tool_calls: list[tuple[str, str, str]] = field(default_factory=list)


# (the chat so far, the tools in the OpenAI format) -> the model's reply
ChatPolicy = Callable[[list[dict[str, Any]], list[dict[str, Any]]], Awaitable[ChatTurn]]


def _arguments(name: str, text: str, offered: set[str]) -> tuple[dict[str, Any] | None, str | None]:
    try:
        arguments = json.loads(text or "{}")
    except ValueError:
        return None, f"the arguments of {name} are not JSON: {text[:80]!r}"
    if not isinstance(arguments, dict):
        return None, f"the arguments of {name} must be a JSON object"
    if name not in offered:
        return None, f"no tool {name!r}; the tools are {', '.join(sorted(offered)) or 'none'}"
    return arguments, None


async def play_chat(task: McpTask, scenario: Scenario, tools: Tools, chat: ChatPolicy) -> Trajectory:
    """Play `scenario` with a chat model against `tools` (an open server); the reward is set."""
    limits = task.spec.limits
    offered = {t.name for t in tools.tools}
    specs = [t.openai() for t in tools.tools]
    out = Trajectory()
    system = [{"role": "system", "content": task.spec.system_prompt}] if task.spec.system_prompt else []
    out.messages = [*system, {"role": "user", "content": scenario.prompt}]
    try:
        with anyio.fail_after(limits.episode_timeout_s):
            while True:
                if out.turns >= limits.max_turns:
                    out.end = EndReason.MAX_TURNS
                    break
                turn = await chat(list(out.messages), specs)
                out.turns += 1
                if not turn.tool_calls:
                    out.messages.append({"role": "assistant", "content": turn.content})
                    out.answer, out.end = turn.content.strip(), EndReason.ANSWER
                    break
                out.messages.append(
                    {
                        "role": "assistant",
                        "content": turn.content,
                        "tool_calls": [
                            {"id": i, "type": "function", "function": {"name": n, "arguments": a}}
                            for i, n, a in turn.tool_calls
                        ],
                    }
                )
                out.tool_calls += len(turn.tool_calls)
                if out.tool_calls > limits.max_tool_calls:
                    out.end = EndReason.MAX_TOOL_CALLS
                    break
                for call_id, name, text in turn.tool_calls:
                    arguments, error = _arguments(name, text, offered)
                    if arguments is None:
                        out.malformed_calls += 1
                        result = f"Error: {error}"
                    else:
                        outcome = await tools.call(name, arguments)
                        out.tool_errors += int(outcome.is_error)
                        out.trace.append(
                            {"name": name, "arguments": arguments, "result": outcome.text, "is_error": outcome.is_error}
                        )
                        result = outcome.text
                    out.messages.append({"role": "tool", "tool_call_id": call_id, "content": result})
    except TimeoutError:
        out.end = EndReason.TIMEOUT
    out.reward = task.reward(out.answer, scenario, out.trace)
    return out


async def run_chat_episode(
    task: McpTask, scenario: Scenario, chat: ChatPolicy, env: Mapping[str, str] | None = None
) -> Trajectory:
    """One chat episode on a fresh server (started and ended here)."""
    async with open_server(task, env) as server:
        return await play_chat(task, scenario, server, chat)


def episode_facts(t: Trajectory) -> dict[str, Any]:
    """What a smoke test reports of one episode (kept with its group: `overrides`)."""
    return {
        "tool_calls": t.tool_calls,
        "malformed_calls": t.malformed_calls,
        "tool_errors": t.tool_errors,
        "turns": t.turns,
        "end": t.end.value,
        "reward": t.reward,
    }
