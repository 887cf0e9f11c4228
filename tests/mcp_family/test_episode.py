"""Episodes: token-level multi-turn trajectories (policy tokens trained, tool output masked), the
limits, the tools offered, the server's environment, and episodes against a real stdio server."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import anyio
import psutil
import pytest

from mcp_rl.environments.mcp_family.episode import EndReason, Trajectory, play, run_episode, scored_group
from mcp_rl.environments.mcp_family.server import CallOutcome, ToolServerError, mcp_server_env, open_server
from mcp_rl.environments.mcp_family.taskfile import McpTask, load
from mcp_rl.environments.mcp_family.tools import ToolSpec
from mcp_rl.scored_data import MASKED, PROMPT_LOGPROB
from mcp_rl.settings import SECRET_ENV_VARS
from tests.kit.wait import listening, wait_for
from tests.mcp_family.kit import (
    SMOL_TEMPLATE,
    TINY_SERVER,
    TOOLS_TEMPLATE,
    CharTokenizer,
    ScriptedPolicy,
    call,
    write_task,
)


class FakeTools:
    """In-process tools (the limits' tests need no server process)."""

    def __init__(self) -> None:
        self.tools = [ToolSpec("capital", "The capital.", {"type": "object"})]
        self.calls: list[tuple[str, dict[str, Any]]] = []

    async def call(self, name: str, arguments: dict[str, Any]) -> CallOutcome:
        self.calls.append((name, arguments))
        return CallOutcome(text="Paris", is_error=False, full_bytes=5)


def _play(task: McpTask, replies: list[str], template: str = SMOL_TEMPLATE, **kw: Any) -> tuple[Trajectory, FakeTools]:
    tokenizer = CharTokenizer(template)
    tools = FakeTools()
    scenario = next(s for s in task.train + task.held_out if s.answer == "Paris")
    out = anyio.run(lambda: play(task, scenario, tools, tokenizer, ScriptedPolicy(tokenizer, replies), **kw))
    return out, tools


def _trained_text(out: Trajectory) -> list[str]:
    """The runs of trained tokens, as text."""
    runs: list[str] = []
    previous = False
    for token, trained in zip(out.tokens, out.trained, strict=True):
        if trained and not previous:
            runs.append("")
        if trained:
            runs[-1] += "<|im_end|>" if token == 0 else chr(token)
        previous = trained
    return runs


@pytest.mark.parametrize("template", [SMOL_TEMPLATE, TOOLS_TEMPLATE])
def test_a_trajectory_trains_the_policy_tokens_and_masks_the_rest(tmp_path: Path, template: str) -> None:
    task = load(write_task(tmp_path))
    replies = [call("capital", country="France"), "Paris"]
    out, tools = _play(task, replies, template)
    assert out.end is EndReason.ANSWER and out.answer == "Paris" and out.reward == 1.0
    assert tools.calls == [("capital", {"country": "France"})]
    assert out.turns == 2 and out.tool_calls == 1 and out.malformed_calls == 0
    # Exactly the sampled tokens are trained, nothing else (the tool's output is masked).
    assert _trained_text(out) == [r + "<|im_end|>" for r in replies]
    masked_text = "".join(chr(t) if t else "<|im_end|>" for t, k in zip(out.tokens, out.trained, strict=True) if not k)
    assert "Paris" in masked_text  # the tool result is in the sequence, untrained
    assert out.masks == [t if k else MASKED for t, k in zip(out.tokens, out.trained, strict=True)]
    assert [lp for lp, k in zip(out.logprobs, out.trained, strict=True) if not k] == [
        PROMPT_LOGPROB
    ] * out.trained.count(False)
    assert [lp for lp, k in zip(out.logprobs, out.trained, strict=True) if k] == [-0.5] * out.trained.count(True)
    # The whole sequence is the chat as the template renders it (the policy saw exactly this).
    full = CharTokenizer(template).apply_chat_template(
        out.messages, tools=None if template == SMOL_TEMPLATE else [t.openai() for t in tools.tools]
    )
    # (but the template's newline after the final answer: the episode ends at its end token)
    assert CharTokenizer(template).decode(out.tokens) + "\n" == full
    group = scored_group([out, out])
    assert group["scores"] == [1.0, 1.0] and group["masks"][0] == out.masks and group["inference_logprobs"] is not None


def test_a_malformed_call_is_an_error_turn_and_is_counted(tmp_path: Path) -> None:
    task = load(write_task(tmp_path))
    out, tools = _play(task, ["<tool_call>{capital}</tool_call>", call("nope"), "Paris"])
    assert out.malformed_calls == 2 and out.tool_calls == 2 and tools.calls == []
    errors = [m["content"] for m in out.messages if m["role"] == "user" and "Error:" in m["content"]]
    assert len(errors) == 2 and "is not JSON" in errors[0] and "no tool 'nope'" in errors[1]
    assert out.end is EndReason.ANSWER and out.reward == 1.0


def test_the_limits_end_an_episode(tmp_path: Path) -> None:
    task = load(write_task(tmp_path))  # max_turns 4, max_tool_calls 3
    out, tools = _play(task, [call("capital", country="France")] * 10)
    assert out.end is EndReason.MAX_TURNS and out.turns == 3 or out.end is EndReason.MAX_TOOL_CALLS
    assert len(tools.calls) <= 3 and out.answer is None and out.reward == 0.0
    many = call("capital", country="France") * 2
    out, tools = _play(task, [many, many])
    assert out.end is EndReason.MAX_TOOL_CALLS and len(tools.calls) == 2 and out.tool_calls == 4
    tight = load(write_task(tmp_path, limits="{max_turns: 2, max_tool_calls: 9}"))
    out, tools = _play(tight, [call("capital", country="France")] * 5)
    assert out.end is EndReason.MAX_TURNS and out.turns == 2 and len(tools.calls) == 2
    out, _ = _play(task, [call("capital", country="France"), "Paris"], context_tokens=500)
    assert out.end is EndReason.CONTEXT and out.reward == 0.0


def test_tools_declared_destructive_or_open_world_are_offered_only_by_name(tmp_path: Path) -> None:
    async def names(task: McpTask) -> list[str]:
        async with open_server(task) as server:
            return [t.name for t in server.tools]

    default = anyio.run(names, load(write_task(tmp_path)))
    assert "capital" in default and "wipe" not in default and "web_search" not in default
    named = anyio.run(names, load(write_task(tmp_path, extra="tools: [wipe, capital]\n")))
    assert named == ["wipe", "capital"]
    with pytest.raises(ToolServerError, match=r"does not have: \['nothing'\]"):
        anyio.run(names, load(write_task(tmp_path, extra="tools: [nothing]\n")))


def test_the_server_gets_only_the_allowed_variables() -> None:
    base = {
        "PATH": "/bin",
        "HOME": "/h",
        "LANG": "C",
        "CAPITALS_EXTRA": "1",
        "OTHER": "2",
        "AWS_SECRET_ACCESS_KEY": "s",
    }
    base |= {name: "secret-value" for name in SECRET_ENV_VARS}
    env = mcp_server_env(["CAPITALS_EXTRA", *SECRET_ENV_VARS], base)  # even named, our keys stay out
    assert env == {"PATH": "/bin", "HOME": "/h", "LANG": "C", "CAPITALS_EXTRA": "1"}


def test_secrets_never_reach_a_real_server_process(tmp_path: Path) -> None:
    task = load(
        write_task(
            tmp_path,
            env_vars="[CAPITALS_EXTRA, TINKER_API_KEY]",
            limits="{output_bytes: 100000, max_tool_calls: 3}",
            extra="tools: [env_names]\n",
        )
    )
    source = dict(os.environ) | {name: "sk-test-secret" for name in SECRET_ENV_VARS}
    source |= {"CAPITALS_EXTRA": "yes", "UNRELATED_SETTING": "no"}

    async def seen() -> set[str]:
        async with open_server(task, source) as server:
            return set((await server.call("env_names", {})).text.split())

    names = anyio.run(seen)
    assert "CAPITALS_EXTRA" in names and "PATH" in names
    assert not names & set(SECRET_ENV_VARS) and "UNRELATED_SETTING" not in names


def _servers_alive() -> list[psutil.Process]:
    return [p for p in psutil.Process().children(recursive=True) if str(TINY_SERVER) in " ".join(p.cmdline())]


def test_an_episode_against_a_real_stdio_server(tmp_path: Path) -> None:
    task = load(write_task(tmp_path))
    tokenizer = CharTokenizer(SMOL_TEMPLATE)
    scenario = next(s for s in task.train + task.held_out if s.answer == "Lima")
    policy = ScriptedPolicy(tokenizer, [call("capital", country="Peru"), "Lima"])
    out = anyio.run(lambda: run_episode(task, scenario, tokenizer, policy))
    assert out.trace == [{"name": "capital", "arguments": {"country": "Peru"}, "result": "Lima", "is_error": False}]
    assert out.end is EndReason.ANSWER and out.reward == 1.0
    assert "<tool_response>\nLima\n</tool_response>" in tokenizer.decode(policy.prompts[1])
    assert _servers_alive() == []  # the episode's server process ended with it


def test_a_slow_call_an_error_and_a_long_result_are_bounded(tmp_path: Path) -> None:
    task = load(
        write_task(
            tmp_path,
            extra="tools: [slow, big, capital]\n",
            limits="{call_timeout_s: 1, output_bytes: 200, max_tool_calls: 5}",
        )
    )
    tokenizer = CharTokenizer(SMOL_TEMPLATE)
    replies = [call("slow", seconds=30), call("big", size=5000), call("capital", country=7), "Paris"]
    policy = ScriptedPolicy(tokenizer, replies)
    out = anyio.run(lambda: run_episode(task, task.train[0], tokenizer, policy))
    slow, big, bad = out.trace
    assert slow["is_error"] and "did not answer within 1 s" in slow["result"]
    assert len(big["result"].encode()) <= 200 and "5000 bytes" in big["result"]
    assert bad["is_error"]  # a wrong argument type: the server's validation error, shown to the model
    assert out.tool_errors == 2 and out.end is EndReason.ANSWER
    assert _servers_alive() == []


def test_a_server_that_does_not_start_is_a_clear_error(tmp_path: Path) -> None:
    path = write_task(tmp_path)
    path.write_text(path.read_text().replace(str(TINY_SERVER), str(tmp_path / "no_such_server.py")))
    task = load(path)
    tokenizer = CharTokenizer(SMOL_TEMPLATE)
    with pytest.raises(ToolServerError, match="capitals.mcp.yaml failed to start"):
        anyio.run(lambda: run_episode(task, task.train[0], tokenizer, ScriptedPolicy(tokenizer, ["x"])))


def test_a_first_turn_prefill_is_prompt_and_the_policy_continues_it(tmp_path: Path) -> None:
    prefill = '<tool_call>{"name": "capital", "arguments": {"country": "'
    task = load(write_task(tmp_path, extra=f"first_turn_prefill: {json.dumps(prefill)}\n"))
    out, tools = _play(task, ['France"}}</tool_call>', "Paris"])
    assert tools.calls == [("capital", {"country": "France"})] and out.reward == 1.0
    assert _trained_text(out) == ['France"}}</tool_call><|im_end|>', "Paris<|im_end|>"]  # the prefill is not trained
    assert out.messages[-3]["content"] == prefill + 'France"}}</tool_call>'
    full = CharTokenizer(SMOL_TEMPLATE).apply_chat_template(out.messages)
    assert CharTokenizer(SMOL_TEMPLATE).decode(out.tokens) + "\n" == full


def test_the_validator_reports_a_good_task_and_each_problem(tmp_path: Path) -> None:
    from mcp_rl.environments.mcp_family.validate import validate

    good = anyio.run(validate, load(write_task(tmp_path)))
    assert good.ok and "capital" in good.offered and "wipe" not in good.offered
    raising = "reward: {kind: check, check: \"def check(answer, trace): return 1 / (answer != 'Lima')\"}\n"
    bad = anyio.run(validate, load(write_task(tmp_path, extra=raising)))
    # Only the two Lima scenarios (lines 3 and 7) make this check raise.
    assert [p.message.split(": the reward raised")[0] for p in bad.problems] == ["capitals.jsonl:3", "capitals.jsonl:7"]
    path = write_task(tmp_path)
    path.write_text(path.read_text().replace(str(TINY_SERVER), str(tmp_path / "gone.py")))
    broken = anyio.run(validate, load(path))
    assert not broken.ok and "failed to start" in broken.problems[0].message


def test_an_episode_against_a_streamable_http_server(tmp_path: Path) -> None:
    import subprocess
    import sys

    from mcp_rl.ports import allocate_ports

    (port,) = allocate_ports(1)
    server = subprocess.Popen(
        [sys.executable, str(TINY_SERVER), "http", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:

        def up() -> bool:
            assert server.poll() is None, "the HTTP server did not start"
            return listening("127.0.0.1", port)

        wait_for(up, 30, "the HTTP server", interval=0.1)
        write_task(tmp_path)  # (for its capitals.jsonl)
        path = tmp_path / "http.mcp.yaml"
        path.write_text(
            f"name: http\nserver: {{url: 'http://127.0.0.1:{port}/mcp', auth_env_var: TINY_TOKEN}}\n"
            "scenarios: capitals.jsonl\nheld_out_fraction: 0.5\n"
        )
        task = load(path)
        tokenizer = CharTokenizer(SMOL_TEMPLATE)
        scenario = next(s for s in task.train + task.held_out if s.answer == "Tokyo")
        policy = ScriptedPolicy(tokenizer, [call("capital", country="Japan"), "Tokyo"])
        out = anyio.run(lambda: run_episode(task, scenario, tokenizer, policy, env={"TINY_TOKEN": "t"}))
        assert out.trace[0]["result"] == "Tokyo" and out.reward == 1.0
    finally:
        server.terminate()
        server.wait(timeout=10)


def test_a_server_that_dies_mid_episode_ends_the_episode_with_its_cause(tmp_path: Path) -> None:
    # Not a tool error for the model to read: the episode cannot go on (and a group of them fails).
    task = load(write_task(tmp_path, extra="tools: [capital, crash]\n"))
    tokenizer = CharTokenizer(SMOL_TEMPLATE)
    policy = ScriptedPolicy(tokenizer, [call("capital", country="Peru"), call("crash"), "Lima"])
    with pytest.raises(ToolServerError, match="ended during the episode \\(calling crash\\)"):
        anyio.run(lambda: run_episode(task, task.train[0], tokenizer, policy))
    assert _servers_alive() == []
