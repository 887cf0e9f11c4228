"""The read-back reward: after the episode, on the same server session, a tool call whose result is
compared with what the scenario expects (state-based), against a real stateful stdio server."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import anyio
import pytest

from mcp_rl.environments.mcp_family.episode import run_episode
from mcp_rl.environments.mcp_family.rewards import compare, json_holds
from mcp_rl.environments.mcp_family.taskfile import ReadBackSpec, Scenario, TaskFileError, load
from tests.mcp_family.kit import FIXTURES, SMOL_TEMPLATE, CharTokenizer, ScriptedPolicy, call

NOTES_SERVER = FIXTURES / "notes_server.py"


def _task(folder: Path, read_back: str, scenarios: list[dict]) -> Path:
    (folder / "notes.jsonl").write_text("".join(json.dumps(s) + "\n" for s in scenarios))
    path = folder / "notes.mcp.yaml"
    path.write_text(
        "name: notes\n"
        f"server:\n  command: {json.dumps(sys.executable)}\n  args: [{json.dumps(str(NOTES_SERVER))}]\n"
        "scenarios: notes.jsonl\nheld_out_fraction: 0.5\n"
        "tools: [add_note]\n"  # the read-back tool is not offered to the policy
        "reward: {kind: read_back}\n"
        f"read_back: {read_back}\n"
        "limits: {max_turns: 4, max_tool_calls: 3, call_timeout_s: 5, max_tokens_per_turn: 200}\n"
    )
    return path


SCENARIOS = [{"prompt": f"Remember to buy item {i}", "expected_state": [f"item {i}", "buy"]} for i in range(12)]


def _play(task_path: Path, scenario: Scenario, replies: list[str]):
    task = load(task_path)
    tokenizer = CharTokenizer(SMOL_TEMPLATE)
    policy = ScriptedPolicy(tokenizer, replies)
    return anyio.run(lambda: run_episode(task, scenario, tokenizer, policy)), policy


def test_the_server_state_after_the_episode_is_the_reward(tmp_path: Path) -> None:
    path = _task(tmp_path, "{tool: list_notes, expect_field: expected_state, match: contains}", SCENARIOS)
    task = load(path)
    scenario = task.train[0]
    wanted = scenario.data["expected_state"][0]
    # Saying it did is not doing it: no call, a confident answer -> 0.
    out, _ = _play(path, scenario, [f"Done, I noted '{wanted}' to buy."])
    assert out.reward == 0.0 and out.read_back is not None
    assert out.read_back["tool"] == "list_notes" and "0 of 2 expected found" in out.read_back["reason"]
    # Doing it: the note is in the server's state when it is read back -> 1.
    out, _ = _play(path, scenario, [call("add_note", text=f"Buy {wanted.upper()}"), "Done"])
    assert out.reward == 1.0 and out.trace[0]["name"] == "add_note"
    assert "buy" in out.read_back["result"].lower()
    # Half of it: one of the two expected strings -> 0.5; and a fresh server per episode: the
    # earlier episode's note is gone.
    out, _ = _play(path, scenario, [call("add_note", text=wanted), "Done"])
    assert out.reward == 0.5 and "missing ['buy']" in out.read_back["reason"]
    # The read-back is not one of the policy's calls.
    assert out.tool_calls == 1 and [c["name"] for c in out.trace] == ["add_note"]


def test_json_subset_and_a_failing_read_back(tmp_path: Path) -> None:
    scenarios = [{"prompt": f"Note {i}", "expected_state": {"notes": [{"text": f"n{i}"}]}} for i in range(12)]
    path = _task(tmp_path, "{tool: list_notes, match: json_subset}", scenarios)
    task = load(path)
    scenario = task.train[0]
    text = scenario.data["expected_state"]["notes"][0]["text"]
    out, _ = _play(path, scenario, [call("add_note", text="other"), call("add_note", text=text), "ok"])
    assert out.reward == 1.0, out.read_back
    out, _ = _play(path, scenario, [call("add_note", text=text + "x"), "ok"])
    assert out.reward == 0.0 and "does not hold" in out.read_back["reason"]
    # A read-back tool the server lacks scores 0 with the reason; the episode is kept.
    broken = _task(tmp_path, "{tool: no_such_tool, match: json_subset}", scenarios)
    out, _ = _play(broken, load(broken).train[0], ["ok"])
    assert out.reward == 0.0 and out.read_back is not None
    assert "no_such_tool" in out.read_back["reason"]


def test_read_back_comparisons_not_shaped_like_the_fixture() -> None:
    spec = ReadBackSpec(tool="t", expect_field="want")
    s = Scenario(prompt="p", answer=None, data={"want": "Café au lait"}, line=1)
    assert compare(spec, "ordered: CAFÉ  AU LAIT!", s)[0] == 1.0
    assert compare(spec, "tea", s)[0] == 0.0
    bad = Scenario(prompt="p", answer=None, data={"want": 3}, line=1)
    assert compare(spec, "3", bad) == (0.0, "expect_field must hold a string or a list of strings for match: contains")
    assert json_holds({"a": [1, {"b": "X"}], "c": 2}, {"a": [{"b": "x"}]})
    assert not json_holds({"a": [1]}, {"a": [2]})
    assert not json_holds({"a": 1}, {"a": True})  # 1 is not true
    assert not json_holds([1, 2], {"a": 1})


def test_a_read_back_task_needs_its_section_and_the_expected_field(tmp_path: Path) -> None:
    path = _task(tmp_path, "{tool: list_notes}", SCENARIOS)
    path.write_text(path.read_text().replace("read_back: {tool: list_notes}\n", ""))
    with pytest.raises(TaskFileError, match="read_back .* is given exactly when reward.kind is read_back"):
        load(path)
    lacking = [{"prompt": f"p{i}"} for i in range(12)]
    with pytest.raises(TaskFileError, match="needs 'expected_state'"):
        load(_task(tmp_path, "{tool: list_notes}", lacking))
