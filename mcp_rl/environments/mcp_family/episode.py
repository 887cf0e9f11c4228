"""One episode against an MCP server as one token-level multi-turn trajectory.

The policy is sampled from the running token sequence itself (never a re-rendered prompt), so
the trajectory is exactly what it was conditioned on: the first prompt, then per turn the
policy's sampled tokens (trained) and the environment's turn (masked: the chat template's close
of the assistant message, the tool results or error, the next assistant header). The
environment's turn is the text the template adds when the chat grows by those messages; a
template that re-renders earlier turns differently (it must be append-only) fails the episode.

The episode ends on a final answer (a reply without a tool call) or a limit: turns, tool calls
(malformed ones count), the context, the episode's seconds. Every tool call is bounded by the
task's seconds and its result by its bytes (`server.ToolServer.call`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

import anyio

from mcp_rl.environments.mcp_family.rewards import read_back
from mcp_rl.environments.mcp_family.server import CallOutcome, open_server
from mcp_rl.environments.mcp_family.taskfile import McpTask, Scenario
from mcp_rl.environments.mcp_family.tools import Renderer, ToolSpec, parse_reply
from mcp_rl.scored_data import MASKED, PROMPT_LOGPROB


@dataclass(frozen=True)
class Sample:
    """One policy turn: its tokens and logprobs exactly as sampled, and its text."""

    tokens: list[int]
    logprobs: list[float] | None
    text: str


# (the token sequence so far, the most tokens to sample) -> the next turn
Policy = Callable[[list[int], int], Awaitable[Sample]]


class Tools(Protocol):
    tools: list[ToolSpec]

    async def call(self, name: str, arguments: dict[str, Any]) -> CallOutcome: ...


class EndReason(StrEnum):
    ANSWER = "answer"
    MAX_TURNS = "max_turns"
    MAX_TOOL_CALLS = "max_tool_calls"
    CONTEXT = "context"
    TIMEOUT = "timeout"


class EpisodeFailed(RuntimeError):
    """The episode cannot become a trajectory (the template is not append-only, an empty turn)."""


@dataclass
class Trajectory:
    tokens: list[int] = field(default_factory=list)
    trained: list[bool] = field(default_factory=list)  # True: the policy sampled this token
    logprobs: list[float] = field(default_factory=list)  # PROMPT_LOGPROB where not trained
    messages: list[dict[str, Any]] = field(default_factory=list)
    trace: list[dict[str, Any]] = field(default_factory=list)  # every executed call and its result
    answer: str | None = None
    end: EndReason = EndReason.MAX_TURNS
    turns: int = 0
    tool_calls: int = 0  # executed and malformed
    malformed_calls: int = 0
    tool_errors: int = 0
    reward: float = 0.0
    exact_logprobs: bool = True  # False when a turn came without logprobs (a text-only server)
    read_back: dict[str, Any] | None = None  # the read-back call's tool, result, score and reason
    offered: list[str] = field(default_factory=list)  # the tools the policy was offered

    def add(self, tokens: list[int], *, trained: bool, logprobs: list[float] | None = None) -> None:
        self.tokens.extend(tokens)
        self.trained.extend([trained] * len(tokens))
        if trained and logprobs is not None and len(logprobs) == len(tokens):
            self.logprobs.extend(logprobs)
        else:
            if trained:
                self.exact_logprobs = False
            self.logprobs.extend([PROMPT_LOGPROB if not trained else 0.0] * len(tokens))

    @property
    def masks(self) -> list[int]:
        """The trainer's labels: the policy's tokens, MASKED everywhere else (tool output too)."""
        return [t if keep else MASKED for t, keep in zip(self.tokens, self.trained, strict=True)]


def _encode(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer.encode(text, add_special_tokens=False)) if text else []


async def play(
    task: McpTask,
    scenario: Scenario,
    tools: Tools,
    tokenizer: Any,
    policy: Policy,
    *,
    context_tokens: int = 4096,
) -> Trajectory:
    """Play `scenario` with `policy` against `tools` (an open server); the reward is set."""
    limits = task.spec.limits
    renderer = Renderer(tokenizer, tools.tools, task.spec.system_prompt)
    offered = [t.name for t in tools.tools]
    out = Trajectory(offered=offered)
    out.messages = renderer.first_messages(scenario.prompt)
    shown = renderer.render(out.messages, generation=True)  # the text of out.tokens
    out.add(_encode(tokenizer, shown), trained=False)
    eos = getattr(tokenizer, "eos_token", None) or ""
    eos_id = getattr(tokenizer, "eos_token_id", None)
    try:
        with anyio.fail_after(limits.episode_timeout_s):
            while True:
                if out.turns >= limits.max_turns:
                    out.end = EndReason.MAX_TURNS
                    break
                if len(out.tokens) + limits.max_tokens_per_turn > context_tokens:
                    out.end = EndReason.CONTEXT
                    break
                prefill = task.spec.first_turn_prefill if out.turns == 0 else None
                if prefill:
                    # Part of the prompt (masked): the policy continues it.
                    out.add(_encode(tokenizer, prefill), trained=False)
                    shown += prefill
                sample = await policy(list(out.tokens), limits.max_tokens_per_turn)
                if not sample.tokens:
                    raise EpisodeFailed("the policy returned an empty turn")
                out.turns += 1
                out.add(sample.tokens, trained=True, logprobs=sample.logprobs)
                said = (prefill or "") + sample.text
                out.messages.append({"role": "assistant", "content": said})
                reply = parse_reply(said, offered)
                if reply.answer is not None:
                    out.answer, out.end = reply.answer, EndReason.ANSWER
                    break
                out.malformed_calls += len(reply.errors)
                out.tool_calls += len(reply.calls) + len(reply.errors)
                if out.tool_calls > limits.max_tool_calls:
                    out.end = EndReason.MAX_TOOL_CALLS
                    break
                before = renderer.render(out.messages, generation=False)
                for call in reply.calls:
                    outcome = await tools.call(call.name, call.arguments)
                    out.tool_errors += int(outcome.is_error)
                    out.trace.append(
                        {
                            "name": call.name,
                            "arguments": call.arguments,
                            "result": outcome.text,
                            "is_error": outcome.is_error,
                        }
                    )
                    out.messages.append(renderer.result_message(call.name, outcome.text))
                if reply.errors:
                    out.messages.append(renderer.error_message(reply.errors))
                after = renderer.render(out.messages, generation=True)
                out.add(_encode(tokenizer, _environment_turn(shown, sample, before, after, eos, eos_id)), trained=False)
                shown = after
    except TimeoutError:
        out.end = EndReason.TIMEOUT
    out.reward = task.reward(out.answer, scenario, out.trace)
    return out


def _environment_turn(shown: str, sample: Sample, before: str, after: str, eos: str, eos_id: int | None) -> str:
    """The text between the policy's tokens and the next turn's: the template's close of the
    assistant message (less an end token the policy sampled itself), the new messages and the
    next assistant header."""
    if not after.startswith(before):
        raise EpisodeFailed("the chat template re-renders earlier turns (it must be append-only for token-level turns)")
    head = shown + sample.text
    closing = before[len(head) :] if before.startswith(head) else ""
    if eos and sample.tokens and sample.tokens[-1] == eos_id and closing.startswith(eos):
        closing = closing[len(eos) :]
    return closing + after[len(before) :]


async def run_episode(
    task: McpTask,
    scenario: Scenario,
    tokenizer: Any,
    policy: Policy,
    *,
    context_tokens: int = 4096,
    env: Mapping[str, str] | None = None,
) -> Trajectory:
    """One episode on a fresh server (started and ended here); a read-back reward is taken on
    the same session after the episode, before the server ends."""
    async with open_server(task, env) as server:
        out = await play(task, scenario, server, tokenizer, policy, context_tokens=context_tokens)
        spec = task.spec.read_back
        if spec is not None:
            checked = await read_back(server.session, spec, scenario, task.spec.limits.call_timeout_s)
            out.read_back, out.reward = checked.record(), checked.score
        return out


def scored_group(trajectories: list[Trajectory]) -> dict[str, Any]:
    """Atropos's scored group of whole episodes (GRPO: the trainer centres the rewards per
    group): one sequence per episode, tool output masked, logprobs as sampled."""
    exact = all(t.exact_logprobs for t in trajectories)
    return {
        "tokens": [list(t.tokens) for t in trajectories],
        "masks": [t.masks for t in trajectories],
        "scores": [t.reward for t in trajectories],
        "inference_logprobs": [list(t.logprobs) for t in trajectories] if exact else None,
        "messages": [t.messages for t in trajectories],
    }
