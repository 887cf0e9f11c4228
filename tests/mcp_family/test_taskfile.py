"""The MCP task file: loading, refusals, the held-out split, the rewards."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mcp_rl.environments.mcp_family.taskfile import (
    TaskFileError,
    is_held_out,
    load,
    normalise,
)
from tests.mcp_family.kit import FIXTURES, write_task


def test_the_fixture_task_file_loads_and_splits_disjointly() -> None:
    task = load(FIXTURES / "capitals.mcp.yaml")
    assert task.name == "capitals"
    assert task.spec.server.env_vars == ["CAPITALS_EXTRA"]
    train = {s.prompt for s in task.train}
    held = {s.prompt for s in task.held_out}
    assert train and held and not train & held
    assert len(train | held) == 8


def test_the_split_depends_on_the_prompt_alone(tmp_path: Path) -> None:
    # Many prompts, shuffled and extended: no prompt changes side, and the fraction is roughly kept.
    prompts = [f"question number {i}: what is {i} * 7?" for i in range(400)]
    sides = {p: is_held_out(p, 0.25) for p in prompts}
    assert 60 <= sum(sides.values()) <= 140
    task_path = write_task(tmp_path)
    lines = [json.dumps({"prompt": p, "answer": "x"}) for p in prompts]
    (tmp_path / "capitals.jsonl").write_text("\n".join(reversed(lines)) + "\n")
    task = load(task_path)
    assert all(is_held_out(s.prompt, 0.5) for s in task.held_out)
    assert not any(is_held_out(s.prompt, 0.5) for s in task.train)
    again = {s.prompt for s in task.held_out}
    (tmp_path / "capitals.jsonl").write_text("\n".join(lines[::2] + lines[1::2]) + "\n")
    assert {s.prompt for s in load(task_path).held_out} == again


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ("name: t\nserver: {command: x, url: 'http://h/mcp'}\nscenarios: s.jsonl\n", "exactly one of server.command"),
        ("name: t\nserver: {}\nscenarios: s.jsonl\n", "exactly one of server.command"),
        ("name: t\nserver: {url: 'ftp://h'}\nscenarios: s.jsonl\n", "http(s) URL"),
        ("name: t\nserver: {command: x, env_vars: ['A-B']}\nscenarios: s.jsonl\n", "not environment variable names"),
        ("name: t\nserver: {command: x}\nscenarios: s.jsonl\nreward: {kind: check}\n", "reward.check"),
        ("name: t\nserver: {command: x}\nscenarios: s.jsonl\nlimits: {max_turns: 0}\n", "limits.max_turns"),
        ("name: t\nserver: {command: x}\nscenarios: s.jsonl\nsurprise: 1\n", "surprise"),
        ("name: t\nserver: {command: x}\nscenarios: missing.jsonl\n", "cannot be read"),
        ("- a list\n", "must be a mapping"),
        (
            "name: t\nserver: {command: x}\nscenarios: s.jsonl\nreward: {kind: check, check: 'def check(:'}\n",
            "does not compile",
        ),
        (
            "name: t\nserver: {command: x}\nscenarios: s.jsonl\nreward: {kind: check, check: 'x = 1'}\n",
            "define a function",
        ),
    ],
)
def test_a_bad_task_file_is_refused_naming_what_to_fix(tmp_path: Path, body: str, says: str) -> None:
    (tmp_path / "s.jsonl").write_text("\n".join(json.dumps({"prompt": f"p{i}", "answer": "a"}) for i in range(20)))
    path = tmp_path / "t.mcp.yaml"
    path.write_text(body)
    with pytest.raises(TaskFileError, match=r"t\.mcp\.yaml|missing\.jsonl") as info:
        load(path)
    assert says in str(info.value)


def test_scenarios_are_checked_line_by_line(tmp_path: Path) -> None:
    path = write_task(tmp_path)
    (tmp_path / "capitals.jsonl").write_text('{"prompt": "a", "answer": "b"}\nnot json\n')
    with pytest.raises(TaskFileError, match=r"capitals\.jsonl:2: not JSON"):
        load(path)
    (tmp_path / "capitals.jsonl").write_text('{"prompt": "a", "answer": 3}\n')
    with pytest.raises(TaskFileError, match="'answer' must be a string"):
        load(path)
    # An answer-based reward needs an answer on every line.
    (tmp_path / "capitals.jsonl").write_text("".join(json.dumps({"prompt": f"q{i}"}) + "\n" for i in range(9)))
    with pytest.raises(TaskFileError, match="needs an 'answer' on every scenario"):
        load(path)


def test_normalised_and_exact_rewards(tmp_path: Path) -> None:
    task = load(write_task(tmp_path))
    scenario = task.train[0]
    assert scenario.answer is not None
    shouted = f'  "{scenario.answer.upper()}." '
    assert task.reward(shouted, scenario, []) == 1.0
    assert task.reward("Berlin", scenario, []) == 0.0
    assert task.reward(None, scenario, []) == 0.0  # a limit ended it: no answer
    exact = load(write_task(tmp_path, extra="reward: {kind: exact}\n"))
    assert exact.reward(shouted, exact.train[0], []) == 0.0
    assert exact.reward(f" {scenario.answer}\n", exact.train[0], []) == 1.0
    assert normalise("Ｐａｒｉｓ!") == "paris"  # full-width letters are the same word


def test_a_check_reward_sees_the_answer_and_the_trace(tmp_path: Path) -> None:
    check = (
        "def check(answer, trace):\n"
        "    used = any(c['name'] == 'capital' and not c['is_error'] for c in trace)\n"
        "    return (0.5 if used else 0.0) + (0.5 if answer.strip() == 'Paris' else 0.0)\n"
    )
    extra = "reward:\n  kind: check\n  check: |\n" + "".join(f"    {line}\n" for line in check.splitlines())
    task = load(write_task(tmp_path, extra=extra))
    s = task.train[0]
    trace = [{"name": "capital", "arguments": {"country": "France"}, "result": "Paris", "is_error": False}]
    assert task.reward("Paris", s, trace) == 1.0
    assert task.reward("Paris", s, []) == 0.5
    assert task.reward(None, s, trace) == 0.5


def test_a_check_returning_a_non_score_is_an_error(tmp_path: Path) -> None:
    for returned in ("2.0", "float('nan')", "'yes'"):
        extra = f'reward: {{kind: check, check: "def check(answer, trace): return {returned}"}}\n'
        task = load(write_task(tmp_path, extra=extra))
        with pytest.raises(TaskFileError, match=r"check\(\) returned"):
            task.reward("x", task.train[0], [])


def test_the_readme_task_file_loads(tmp_path: Path) -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Teach a model to use your MCP server", 1)[1]
    block = section.split("```yaml\n", 1)[1].split("```", 1)[0]
    (tmp_path / "jobs.mcp.yaml").write_text(block)
    (tmp_path / "scenarios.jsonl").write_text(
        "".join(json.dumps({"prompt": f"What is person {i}'s job?", "answer": "pilot"}) + "\n" for i in range(20))
    )
    task = load(tmp_path / "jobs.mcp.yaml")
    assert task.spec.tools == ["search_nodes", "open_nodes"] and task.spec.limits.max_turns == 3
    assert task.spec.first_turn_prefill is not None and task.spec.first_turn_prefill.startswith("<tool_call>")
