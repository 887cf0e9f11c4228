"""Issue 44: the validator shows what degenerate replies score (an empty reply, a long digit
string, the prompt echoed, the most common reference answer to every item) and warns past its
stated thresholds (mcp_rl.environments.degenerate_probes): a task with a lenient scorer is
caught, the same task with a strict scorer is not flagged; an Atropos environment is probed
through its own evaluate() against the loopback probe server (reasoning-gym's letter counting
pays digit soup partial credit)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from mcp_rl.environments.degenerate_probes import (
    CREDIT_SHARE,
    DIGITS,
    MEAN_SHARE,
    ProbeResult,
    ProbeServer,
    result,
    warnings,
)
from mcp_rl.environments.discovery import scan
from mcp_rl.environments.validate import validate
from mcp_rl.settings import Settings

# "Which is larger?" (the scaffold's own example task), 40 held-out pairs, answers spread wide.
LARGER = '''
import re

from mcp_rl.task import Task


class {name}(Task):
    """Which of two numbers is larger."""

    name = "{key}"

    def train_items(self):
        return [{{"a": a, "b": 200 - a, "answer": str(max(a, 200 - a))}} for a in range(0, 60)]

    def held_out_items(self):
        return [{{"a": a, "b": a * 3 % 97 + 100, "answer": str(max(a, a * 3 % 97 + 100))}} for a in range(500, 540)]

    def prompt(self, item):
        return f"Which is larger, {{item['a']}} or {{item['b']}}? Reply with just the number."

    def score(self, completion, item):
{body}
'''
FIRST_NUMBER = """        found = re.search(r"-?\\d+", completion)  # lenient: the first number anywhere in the reply
        return 1.0 if found is not None and int(found.group()) == int(item["answer"]) else 0.0"""
STRICT = """        return 1.0 if completion.strip().rstrip(".") == item["answer"] else 0.0"""


def _validate_task(tmp_path: Path, key: str, body: str):
    home = tmp_path / "home"
    (home / "envs").mkdir(parents=True)
    name = "".join(part.title() for part in key.split("_"))
    (home / "envs" / f"{key}.py").write_text(LARGER.format(name=name, key=key, body=body))
    settings = Settings.from_env({"MCP_RL_HOME": str(home)})
    env = scan(settings.environment_dirs()).get(key)
    assert env is not None
    return validate(settings, env, sample=False)


def test_a_first_number_scorer_is_caught_by_the_echoed_prompt(tmp_path: Path) -> None:
    report = _validate_task(tmp_path, "larger_lenient", FIRST_NUMBER)
    assert report.ok, report.problems
    probes = {p["probe"]: p for p in report.degenerate_replies or []}
    assert set(probes) == {"empty", "digits", "echo", "constant"}
    # The echoed question's first number is `a`, the larger one whenever a > b: most held-out items.
    assert probes["echo"]["mean"] > MEAN_SHARE and probes["echo"]["items"] == 32
    assert probes["empty"]["mean"] == 0.0 and probes["digits"]["mean"] == 0.0
    (warning,) = [w for w in report.warnings if w.startswith("The prompt echoed back")]
    assert f"more than {MEAN_SHARE:.0%} of the score range" in warning and "stricter" in warning


def test_a_strict_scorer_is_not_flagged(tmp_path: Path) -> None:
    report = _validate_task(tmp_path, "larger_strict", STRICT)
    assert report.ok, report.problems
    probes = {p["probe"]: p for p in report.degenerate_replies or []}
    assert {p: v["mean"] for p, v in probes.items() if p != "constant"} == {"empty": 0.0, "digits": 0.0, "echo": 0.0}
    assert probes["constant"]["mean"] <= MEAN_SHARE  # answers spread: no one answer pays
    assert not any("score range" in w or "earns some credit" in w for w in report.warnings), report.warnings


def test_the_thresholds_each_probe_is_held_to() -> None:
    # reasoning-gym's substring scorers: 1/32 for the soup on every item: below the mean, past the credit share.
    soup = result("digits", DIGITS, [1 / 32] * 40)
    (said,) = warnings([soup])
    assert "earns some credit on 100% of 40 items" in said and f"above {CREDIT_SHARE:.0%} of items" in said
    # The most common answer at 36 % of the items (the "how many r's"): said with its score.
    (constant,) = warnings([result("constant", "0", [1.0] * 36 + [0.0] * 64)])
    assert constant.startswith("Answering '0' to every item") and "0.36" in constant
    # A constant earns its share of items by design: the credit rule is not applied to it.
    assert warnings([result("constant", "7", [1.0] * 15 + [0.0] * 85)]) == []
    # Clean probes, an aggregate-only one, and a score range that is not 0..1.
    clean = [result(p, "", [0.0] * 10) for p in ("empty", "digits", "echo")]
    assert warnings(clean + [ProbeResult("echo", "", None, 0.1, None)]) == []
    assert warnings([result("empty", "", [-1.0] * 10, low=-1.0)], low=-1.0, high=1.0) == []
    assert len(warnings([result("empty", "", [0.0] * 10, low=-1.0)], low=-1.0, high=1.0)) == 1


def test_the_probe_server_answers_chat_and_text_completions() -> None:
    import openai

    with ProbeServer() as server:
        server.reply = lambda prompt: f"<{prompt}>"
        client = openai.OpenAI(base_url=server.base_url, api_key="x", max_retries=0, timeout=10)
        chat = client.chat.completions.create(
            model="probe",
            messages=[{"role": "system", "content": "s"}, {"role": "user", "content": "hello there"}],
            n=2,
        )
        assert [c.message.content for c in chat.choices] == ["<hello there>"] * 2
        text = client.completions.create(model="probe", prompt="raw prompt")
        assert text.choices[0].text == "<raw prompt>"
        assert server.requests == 2


def _validate_child(file_path: Path, class_name: str, tokenizer: str, home: Path, *extra: str) -> dict:
    from tests.fakes.fake_openrouter import FakeOpenRouter

    with FakeOpenRouter(responder=lambda model, prompt, index: "7", honour_n=True, catalog=["default"]) as fake:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "mcp_rl.environments.validate_child",
                str(file_path),
                class_name,
                str(file_path.parent),
                "--base-url",
                fake.base_url,
                "--tokenizer",
                tokenizer,
                *extra,
            ],
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ, "HOME": str(home), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"},
            check=False,
        )
    assert done.stdout.strip(), done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_reasoning_gym_letter_counting_pays_digit_soup_and_the_validator_says_so(
    tmp_path: Path, tiny_tokenizer: str
) -> None:
    from mcp_rl.environments.bundled import reasoning_gym_env

    preset = {"datasets": "letter_counting", "held_out_size": 32}
    report = _validate_child(
        Path(reasoning_gym_env.__file__), "ReasoningGymEnv", tiny_tokenizer, tmp_path, "--preset", json.dumps(preset)
    )
    facts = report["atropos"]
    probes = {p["probe"]: p for p in facts["degenerate_replies"]}
    assert set(probes) == {"empty", "digits", "echo", "constant"}  # the constant from its samples' answers
    # Every count is a digit the soup contains: len(answer)/len(reply) = 1/32 on (nearly) every item.
    digits = probes["digits"]
    assert digits["items"] == 32 and digits["credited_share"] > CREDIT_SHARE and 0 < digits["mean"] < MEAN_SHARE
    assert any(w.startswith(f"A {len(DIGITS)}-digit string") and "earns some credit" in w for w in report["warnings"])
    assert probes["empty"]["mean"] == 0.0
