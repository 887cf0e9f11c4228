"""The validator runs an Atropos environment for real (mcp_rl.environments.validate_atropos, in
validate_child's process): setup, items, one group against a model, scoring, evaluate(). Fast
tier: the child against a loopback OpenAI-compatible server (tests/fakes); the slow test runs it
through rl_validate_environment against the local base model served for it."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.fakes.fake_openrouter import FakeOpenRouter

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "envs"
CHECKS = FIXTURES / "atropos_checks"


def _larger(model: str, prompt: str, index: int) -> str:
    a, b = (int(x) for x in re.findall(r"\d+", prompt)[:2])
    return str(max(a, b)) if index % 2 else str(min(a, b))  # half right: a group whose rewards differ


def _validate(file_path: Path, class_name: str, base_url: str, tokenizer: str, home: Path) -> dict:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mcp_rl.environments.validate_child",
            str(file_path),
            class_name,
            str(file_path.parent),
            "--base-url",
            base_url,
            "--tokenizer",
            tokenizer,
        ],
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, "HOME": str(home), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"},
        check=False,
    )
    assert done.stdout.strip(), done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(
    ("fixture", "class_name"),
    [("zero_division", "ZeroDivisionEnv"), ("constant_reward", "ConstantRewardEnv")],
)
def test_the_validator_runs_an_atropos_environment(
    fixture: str, class_name: str, tmp_path: Path, tiny_tokenizer: str
) -> None:
    path = CHECKS / f"{fixture}.py"
    with FakeOpenRouter(responder=_larger, honour_n=True, catalog=["default"]) as fake:
        report = _validate(path, class_name, fake.base_url, tiny_tokenizer, tmp_path)
    facts = report["atropos"]
    assert report["kind"] == "atropos"
    assert facts["setup_seconds"] >= 0 and len(facts["items"]) == 3
    # evaluate() ran on a few items of its split, and the score mcp-rl would read is named.
    evaluation = facts["evaluate"]
    assert evaluation["shortened_to"] == {"eval_pairs": 4}
    assert (evaluation["metric"], evaluation["score"]) == ("accuracy", 0.5)  # every other answer right
    assert evaluation["source"] == "the dict evaluate() returned"
    if fixture == "zero_division":
        assert report["ok"] is False
        (problem,) = report["problems"]
        assert problem["check"] == "group" and problem["exception"].startswith("ZeroDivisionError")
        assert Path(problem["file"]).resolve() == path.resolve()
        line = path.read_text(encoding="utf-8").splitlines()[problem["line"] - 1]
        assert "/ len(wrong)" in line
        assert "zero_division.py:" in problem["message"]
    else:
        assert report["ok"] is True and facts["scores"] == [1.0] * 4 and facts["group_seconds"] > 0
        # Its evaluate() counts an answer right when the larger number appears anywhere in the reply: the
        # question echoed back holds both numbers, so it scores every item (an aggregate: no item count).
        probes = {p["probe"]: p for p in facts["degenerate_replies"]}
        assert probes["echo"]["mean"] == 1.0 and probes["echo"]["items"] is None and probes["empty"]["mean"] == 0.0
        assert "constant" not in probes  # no samples, so no reference answers to take one from
        assert any(w.startswith("The prompt echoed back") for w in report["warnings"])
        assert any("no signal" in w for w in report["warnings"])


def test_non_finite_and_varied_scores_are_told_apart() -> None:
    from mcp_rl.environments.validate_atropos import Findings, _check_scores

    found = Findings(Path("x.py"))
    _check_scores(found, {"scores": [0.0, float("nan"), 1.0]})
    assert [p["check"] for p in found.problems] == ["scores"] and "not finite" in found.problems[0]["message"]
    varied = Findings(Path("x.py"))
    _check_scores(varied, {"scores": [0.0, 1.0, 1.0, 0.5]})
    assert not varied.problems and not varied.warnings and varied.facts["scores"] == [0.0, 1.0, 1.0, 0.5]


@pytest.mark.slow
@pytest.mark.anyio
async def test_rl_validate_environment_runs_it_against_the_local_model(home: Path, model_dir: Path) -> None:
    from mcp import Client

    from tests.conftest import stdio_params
    from tests.kit.mcp import ok

    params = stdio_params(home, MCP_RL_MODEL=str(model_dir), MCP_RL_ENV_PATHS=str(CHECKS))
    answers = {}
    async with Client(params) as client:
        for name in ("zero_division", "constant_reward"):
            began = time.monotonic()
            answer = await ok(client, "rl_validate_environment", {"name": name})
            while answer["status"] == "running":  # longer than one call: collected by calling again
                assert time.monotonic() - began < 300
                answer = await ok(client, "rl_validate_environment", {"name": name})
            answers[name] = answer
            print(f"{name}: validated in {time.monotonic() - began:.1f} s")
    broken = answers["zero_division"]
    assert broken["status"] == "failed" and "ZeroDivisionError" in broken["message"]
    (problem,) = broken["report"]["problems"]
    assert problem["file"].endswith("zero_division.py") and problem["line"] is not None
    flat = answers["constant_reward"]
    assert flat["status"] == "passed" and any("no signal" in w for w in flat["report"]["warnings"])
    facts = flat["report"]["atropos"]
    assert facts["group_seconds"] > 0 and facts["evaluate"]["metric"] == "accuracy"
