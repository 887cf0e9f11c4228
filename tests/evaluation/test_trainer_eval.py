"""The trainer's held-out evaluation: the same items every time, outcomes per item in the run
folder, eval/... metrics against the first evaluation, and the summary the status tools show.

The sampler is a stand-in for the trainer's backend (the Sampler interface: tokenizer +
sample); the end-to-end run with the real model is bench/bench_eval.py and test_local_run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mcp_rl.proof.heldout import NoHeldOutItems, held_out_set
from mcp_rl.proof.outcomes import read_outcomes
from mcp_rl.proof.summary import held_out_summary
from mcp_rl.runconfig import EnvironmentRef, RunConfig
from mcp_rl.rundir import eval_outcomes_file
from mcp_rl.trainer.backends.base import SampledSequence, Sampler, SamplingRequest
from mcp_rl.trainer.trainer_eval import HeldOutEvaluator, start_line
from tests.kit.runs import run_config


class CharTokenizer:
    """Characters as token ids; the chat template is the last user message."""

    def apply_chat_template(self, messages: list[dict[str, str]], **_: Any) -> str:
        return messages[-1]["content"]

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return [ord(c) for c in text]

    def decode(self, tokens: list[int], skip_special_tokens: bool = True) -> str:
        return "".join(chr(t) for t in tokens)


class Calculator(Sampler):
    """Answers `a + b` right when a + b is even (`skill` "half") or always ("all")."""

    model_name = "calc"

    def __init__(self, skill: str) -> None:
        self.tokenizer = CharTokenizer()
        self.skill = skill
        self.requests: list[SamplingRequest] = []

    def sample(self, request: SamplingRequest) -> list[SampledSequence]:
        self.requests.append(request)
        a, _, b = self.tokenizer.decode(request.prompt_tokens).split()
        total = int(a) + int(b)
        answer = total if self.skill == "all" or total % 2 == 0 else total + 1
        tokens = self.tokenizer.encode(str(answer))
        return [SampledSequence(tokens=tokens, logprobs=[0.0] * len(tokens), finish_reason="stop")]


def _config(tmp_path: Path, environment: str = "arithmetic", eval_every: int = 0) -> RunConfig:
    ref = EnvironmentRef(name=environment, class_name="X", file_path=tmp_path / "env.py", project_root=tmp_path)
    return run_config(
        tmp_path / "run",
        environment=ref,
        env={"max_operand": 20},
        num_steps=10,
        batch_size=8,
        group_size=4,
        eval_every=eval_every,
    )


def test_arithmetic_held_out_items_are_fixed_and_not_trained_on() -> None:
    from mcp_rl.environments.bundled import arithmetic as arith

    first = held_out_set("arithmetic", {"max_operand": 20})
    again = held_out_set("arithmetic", {"max_operand": 20, "group_size": 4})
    assert [i.id for i in first.items] == [i.id for i in again.items]
    assert len(first.items) >= 200 and first.temperature == 0.0
    train, _ = arith.make_problems(arith.ArithmeticEnvConfig(max_operand=20))
    trained = {frozenset((p["a"], p["b"])) for p in train}
    held = {frozenset(map(int, i.id.split(" + "))) for i in first.items}
    assert not trained & held


def test_an_environment_without_held_out_items_says_so() -> None:
    with pytest.raises(NoHeldOutItems, match="no held-out items.*evaluate"):
        held_out_set("my_env", {})


def test_evaluations_write_outcomes_and_compare_with_the_first(tmp_path: Path) -> None:
    config = _config(tmp_path, eval_every=4)
    evaluator = HeldOutEvaluator(config)
    assert [s for s in range(1, 11) if evaluator.due(s)] == [4, 8, 10]
    base = evaluator.evaluate(Calculator("half"), 0)
    assert base["eval/n"] >= 200 and 0.3 < base["eval/score"] < 0.7
    assert "eval/p_value" not in base  # nothing to compare with yet
    line = start_line(config.paths.metrics, 0, base)
    assert line == base
    sampler = Calculator("all")
    trained = evaluator.evaluate(sampler, 10)
    assert trained["eval/score"] == 1.0
    assert trained["eval/base_score"] == base["eval/score"]
    assert trained["eval/difference"] == pytest.approx(1.0 - base["eval/score"])
    assert trained["eval/p_value"] < 1e-6
    assert trained["eval/ci_low"] > 0
    # Greedy, the environment's answer length, one completion per item.
    assert {(r.temperature, r.max_tokens, r.n) for r in sampler.requests} == {(0.0, 8, 1)}
    outcomes = read_outcomes(eval_outcomes_file(config.paths.run_dir, 10))
    assert len(outcomes) == trained["eval/n"] and all(o.score == 1.0 for o in outcomes)

    summary = held_out_summary(config.paths.run_dir)
    assert summary is not None
    assert (summary.base_step, summary.step, summary.n) == (0, 10, trained["eval/n"])
    assert summary.wins == trained["eval/n"] - round(base["eval/score"] * trained["eval/n"]) and summary.losses == 0
    assert summary.sentence.startswith(f"On {summary.n} held-out items the model at step 10 scored 1.00")
    assert [p.step for p in summary.evaluations] == [0, 10]


def test_a_resumed_run_keeps_its_step_line(tmp_path: Path) -> None:
    config = _config(tmp_path)
    config.paths.run_dir.mkdir(parents=True)
    config.paths.metrics.write_text(json.dumps({"step": 3, "time": 1.0, "reward/mean": 0.5}) + "\n")
    line = start_line(config.paths.metrics, 3, {"eval/score": 0.25})
    assert line == {"reward/mean": 0.5, "eval/score": 0.25}


def test_no_items_no_evaluation(tmp_path: Path) -> None:
    evaluator = HeldOutEvaluator(_config(tmp_path, environment="my_env"))
    assert evaluator.evaluate(Calculator("all"), 0) == {}
    assert held_out_summary(tmp_path / "run") is None


def test_a_held_out_limit_evaluates_the_same_first_items_every_time(tmp_path: Path) -> None:
    config = _config(tmp_path)
    config = config.model_copy(update={"trainer": config.trainer.model_copy(update={"held_out_limit": 20})})
    full = [i.id for i in held_out_set("arithmetic", {"max_operand": 20}).items]
    evaluator = HeldOutEvaluator(config)
    base = evaluator.evaluate(Calculator("half"), 0)
    trained = evaluator.evaluate(Calculator("all"), 10)
    assert base["eval/n"] == trained["eval/n"] == 20 and trained["eval/score"] == 1.0
    for step in (0, 10):
        assert [o.item for o in read_outcomes(eval_outcomes_file(config.paths.run_dir, step))] == full[:20]
    summary = held_out_summary(config.paths.run_dir)
    assert summary is not None and summary.n == 20


def test_a_held_out_limit_above_the_set_takes_all_of_it() -> None:
    items = held_out_set("arithmetic", {"max_operand": 20})
    assert items.limited(None) is items and items.limited(len(items.items) + 5) is items
    first = items.limited(3)
    assert [i.id for i in first.items] == [i.id for i in items.items[:3]]
    assert first.description.startswith("the first 3 of ") and len(items.items) > 3
