"""Issue 47: the MCP validator shows what degenerate final answers earn with the task's own reward
(mcp_family/probes.py): a `contains` reward pays the reply listing every answer (warned, with the
advice), an `exact` one pays no degenerate reply, a Python check is probed through itself (and a
check that raises on a reply a model can give is said), read-back and judge rewards are said to be
unprobeable. In-process on loaded task files (probing needs no server), and once through the
validator's child and rl_validate_environment's report model."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from mcp_rl.environments.degenerate_probes import DIGITS, MEAN_SHARE
from mcp_rl.environments.mcp_family.probes import PROBED_SCENARIOS, probe
from mcp_rl.environments.mcp_family.taskfile import load
from mcp_rl.environments.validate import validate_mcp_task
from mcp_rl.settings import Settings
from tests.mcp_family.kit import TINY_SERVER, write_task

# "Which is larger?": 12 pairs, 12 distinct answers, each answer also in its own prompt.
PAIRS = [(17, 4), (3, 98), (250, 61), (7, 70), (45, 54), (812, 128), (9, 1), (33, 303), (66, 6), (5, 500), (21, 12),
         (640, 46)]  # fmt: skip
ALL_LISTED = "every distinct expected answer joined in one reply"


def larger_task(folder: Path, reward: str, extra_fields: bool = False, extra: str = "") -> Path:
    lines = []
    for a, b in PAIRS:
        line = {"prompt": f"Which is larger, {a} or {b}? Use the tools if you must.", "answer": str(max(a, b))}
        if extra_fields:
            line["expected_state"] = f"max={max(a, b)}"
        lines.append(json.dumps(line))
    (folder / "larger.jsonl").write_text("\n".join(lines) + "\n")
    path = folder / "larger.mcp.yaml"
    path.write_text(
        f"name: larger\nserver:\n  command: {json.dumps(sys.executable)}\n  args: [{json.dumps(str(TINY_SERVER))}]\n"
        f"scenarios: larger.jsonl\nheld_out_fraction: 0.4\nreward:\n{reward}{extra}"
    )
    return path


def means(rows: list[dict[str, object]] | None) -> dict[str, object]:
    assert rows is not None
    return {str(r["probe"]): r["mean"] for r in rows}


def test_a_contains_reward_pays_the_reply_listing_every_answer_and_says_so(tmp_path: Path) -> None:
    probed = probe(load(larger_task(tmp_path, "  kind: contains\n")))
    assert means(probed.rows()) == {"empty": 0.0, "echo": 1.0, "constant": round(1 / 12, 4), "all_answers": 1.0,
                                    "digits": 0.0}  # fmt: skip
    rows = {r["probe"]: r for r in probed.rows() or []}
    assert rows["all_answers"]["credited_share"] == 1.0 and rows["all_answers"]["items"] == 12
    assert str(rows["all_answers"]["reply"]).startswith("17, 98, 250")
    assert probed.facts == {"scenarios_probed": 12, "scenarios": 12, "distinct_answers": 12,
                            "trace": "empty (no tool call)"}  # fmt: skip
    listed = [w for w in probed.warnings if w.startswith(ALL_LISTED.capitalize())]
    assert len(listed) == 1 and f"more than {MEAN_SHARE:.0%}" in listed[0] and "exact or normalised" in listed[0]
    assert any(w.startswith("The prompt echoed back") for w in probed.warnings)  # the answer is in the question
    assert len(probed.warnings) == 2


def test_an_exact_reward_pays_no_degenerate_reply_and_warns_of_none(tmp_path: Path) -> None:
    probed = probe(load(larger_task(tmp_path, "  kind: exact\n")))
    assert means(probed.rows()) == {"empty": 0.0, "echo": 0.0, "constant": round(1 / 12, 4), "all_answers": 0.0,
                                    "digits": 0.0}  # fmt: skip
    assert probed.warnings == []


def test_a_python_check_is_probed_through_itself(tmp_path: Path) -> None:
    # A substring check (the lenient kind): the listing and the echo both pass it.
    lenient = "  kind: check\n  check: |\n    def check(answer, trace, scenario):\n" \
        "        return 1.0 if scenario['answer'] in answer else 0.0\n"  # fmt: skip
    probed = probe(load(larger_task(tmp_path, lenient)))
    # Only "9" of the answers is a substring of the digit string.
    assert [str(max(p)) for p in PAIRS if str(max(p)) in DIGITS] == ["9"]
    assert means(probed.rows()) == {"empty": 0.0, "echo": 1.0, "constant": round(1 / 12, 4), "all_answers": 1.0,
                                    "digits": round(1 / 12, 4)}  # fmt: skip
    assert any("check that refuses a reply naming several answers" in w for w in probed.warnings)
    # A check that fails on an empty reply: that probe is left out and said (training would drop the episode).
    first_word = "  kind: check\n  check: |\n    def check(answer, trace, scenario):\n" \
        "        return float(answer.split()[0] == scenario['answer'])\n"  # fmt: skip
    probed = probe(load(larger_task(tmp_path, first_word)))
    assert set(means(probed.rows())) == {"echo", "constant", "all_answers", "digits"}
    assert means(probed.rows())["constant"] == round(1 / 12, 4) and means(probed.rows())["all_answers"] == 0.0
    (raised,) = probed.warnings
    assert raised.startswith("the reward raised on an empty reply (larger.jsonl:") and "IndexError" in raised


@pytest.mark.parametrize(
    ("reward", "extra", "says"),
    [
        ("  kind: read_back\n", "read_back: {tool: capital, arguments: {country: France}}\n", "reward.kind read_back"),
        ("  kind: judge\n", "judge: {model: local}\n", "reward.kind judge"),
    ],
)
def test_read_back_and_judge_rewards_say_they_cannot_be_probed(
    tmp_path: Path, reward: str, extra: str, says: str
) -> None:
    probed = probe(load(larger_task(tmp_path, reward, extra_fields=True, extra=extra)))
    assert probed.rows() is None and probed.warnings == []
    assert probed.facts["scenarios_probed"] == 0
    assert str(probed.facts["not_probed"]).startswith(says) and "cannot be probed" in str(probed.facts["not_probed"])


def test_at_most_the_stated_number_of_scenarios_is_probed(tmp_path: Path) -> None:
    path = larger_task(tmp_path, "  kind: normalised\n")
    many = [json.dumps({"prompt": f"What is {i} plus one?", "answer": str(i + 1)}) for i in range(PROBED_SCENARIOS + 9)]
    (tmp_path / "larger.jsonl").write_text("\n".join(many) + "\n")
    probed = probe(load(path))
    assert probed.facts["scenarios_probed"] == PROBED_SCENARIOS and probed.facts["scenarios"] == PROBED_SCENARIOS + 9
    assert {r["items"] for r in probed.rows() or []} == {PROBED_SCENARIOS}


def test_the_validators_report_shows_the_probes(settings: Settings, tmp_path: Path) -> None:
    report = validate_mcp_task(
        settings, write_task(tmp_path, extra="reward: {kind: contains}\n"), sample=False, timeout_s=120
    )
    assert report.ok, report.problems
    assert report.degenerate_replies is not None
    assert means([dict(r) for r in report.degenerate_replies])["all_answers"] == 1.0
    assert report.mcp is not None and report.mcp["degenerate_probes"]["scenarios_probed"] == 8
    assert any(w.startswith(ALL_LISTED.capitalize()) for w in report.warnings)


def test_a_judged_task_with_answers_validates_and_its_report_says_why_it_is_not_probed(
    settings: Settings, tmp_path: Path
) -> None:
    # Answers beside a judge (or read-back) reward are the user's notes: scored 0 by the reward
    # offline, they once failed validation as "the reference answer scores 0.0".
    path = larger_task(tmp_path, "  kind: judge\n", extra="judge: {model: local}\n")
    report = validate_mcp_task(settings, path, sample=False, timeout_s=120)
    assert report.ok, report.problems
    assert report.degenerate_replies is None and report.mcp is not None
    assert report.mcp["degenerate_probes"]["not_probed"].startswith("reward.kind judge")
