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


def test_a_contains_reward_finds_the_answer_inside_a_wordy_or_wrapped_reply(tmp_path: Path) -> None:
    task = load(write_task(tmp_path, extra="reward: {kind: contains}\n"))
    s = task.train[0]
    assert s.answer is not None
    answer = s.answer
    for reply in (
        answer,
        f"<tool_response>{answer.upper()}</tool_response>",
        f'The answer is: "{answer}".',
        f"I looked it up.\n\n  {answer}  \nDone",
    ):
        assert task.reward(reply, s, []) == 1.0, reply
    for reply in (f"{answer}x", f"x{answer}", "I do not know", ""):
        assert task.reward(reply, s, []) == 0.0, reply  # not inside a longer word, not absent
    assert task.reward(None, s, []) == 0.0
    # A number is not found inside a longer number, whatever the reply's punctuation.
    (tmp_path / "capitals.jsonl").write_text(
        "".join(json.dumps({"prompt": f"what is {i} + 0?", "answer": str(i)}) + "\n" for i in range(4, 40))
    )
    numbers = load(tmp_path / "capitals.mcp.yaml")
    four = next(x for x in (*numbers.train, *numbers.held_out) if x.answer == "4")
    assert numbers.reward("It is 4.", four, []) == 1.0
    assert numbers.reward("14", four, []) == 0.0
    assert numbers.reward("40", four, []) == 0.0


def test_a_contains_reward_needs_an_answer_on_every_scenario(tmp_path: Path) -> None:
    path = write_task(tmp_path, extra="reward: {kind: contains}\n")
    (tmp_path / "capitals.jsonl").write_text("".join(json.dumps({"prompt": f"q{i}"}) + "\n" for i in range(9)))
    with pytest.raises(TaskFileError, match="contains needs an 'answer' on every scenario"):
        load(path)


def _check_task(tmp_path: Path, check: str) -> Path:
    extra = "reward:\n  kind: check\n  check: |\n" + "".join(f"    {line}\n" for line in check.splitlines())
    return write_task(tmp_path, extra=extra)


def test_a_three_argument_check_sees_the_scenarios_fields_read_only(tmp_path: Path) -> None:
    path = _check_task(
        tmp_path,
        "def check(answer, trace, scenario):\n"
        "    try:\n"
        "        scenario['answer'] = 'tampered'\n"
        "        return 0.0\n"
        "    except TypeError:\n"
        "        pass\n"
        "    scenario['aliases'].append('tampered')\n"
        "    hit = answer == scenario['answer'] or answer in scenario['aliases'][:-1]\n"
        "    return 1.0 if hit else 0.0\n",
    )
    (tmp_path / "capitals.jsonl").write_text(
        "".join(
            json.dumps({"prompt": f"code of word {i}?", "answer": f"C{i}", "aliases": [f"code {i}", f"#{i}"]}) + "\n"
            for i in range(12)
        )
    )
    task = load(path)
    s = task.train[0]
    i = s.data["answer"][1:]
    assert task.reward(f"C{i}", s, []) == 1.0  # the scenario's answer
    assert task.reward(f"#{i}", s, []) == 1.0  # a custom field of its JSONL line
    assert task.reward("C999", s, []) == 0.0
    other = task.train[1]
    assert task.reward(f"#{i}", other, []) == 0.0  # each scenario's own fields
    # Neither the read-only view nor a nested list changed the scenario another episode sees.
    assert s.data["answer"] == f"C{i}" and s.data["aliases"] == [f"code {i}", f"#{i}"]


def test_a_two_argument_check_still_works_and_a_wrong_arity_is_refused(tmp_path: Path) -> None:
    task = load(_check_task(tmp_path, "def check(a, t):\n    return 1.0 if a == 'ok' and not t else 0.0\n"))
    assert task.reward("ok", task.train[0], []) == 1.0 and task.reward("no", task.train[0], []) == 0.0
    varargs = load(_check_task(tmp_path, "def check(*args):\n    return 1.0 if len(args) == 3 else 0.0\n"))
    assert varargs.reward("x", varargs.train[0], []) == 1.0
    for signature in ("def check(answer):", "def check(a, t, s, more):"):
        with pytest.raises(TaskFileError, match=r"check\(answer, trace\) or check\(answer, trace, scenario\)"):
            load(_check_task(tmp_path, f"{signature}\n    return 1.0\n"))


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


@pytest.mark.parametrize("value", ["inf", "nan", float("inf"), float("-inf")])
def test_a_non_finite_number_is_refused_in_a_task_file(value: object) -> None:
    # An infinite judge cap would be no cap at all; an infinite limit would be no limit.
    from pydantic import ValidationError

    from mcp_rl.environments.mcp_family.taskfile import JudgeSpec, Limits

    with pytest.raises(ValidationError):
        JudgeSpec(model="openai/gpt-4o-mini", max_cost_usd=value)
    float_limits = [name for name, f in Limits.model_fields.items() if f.annotation in (float, "float")]
    assert float_limits, "Limits has float fields to check"
    with pytest.raises(ValidationError):
        Limits(**{float_limits[0]: value})
