"""Issue 44's reasoning-gym case: an environment evaluated by its own evaluate() grades a few
constant answers with its own scorer (mcp_rl.environments.constant_answers), so a gain made of
digit soup is measured against what that soup scores on every item, not against a lower bound.

Real reasoning-gym letter-counting items and its real scorer (len(oracle)/len(answer) for an
answer containing the oracle), the samples as the bundled environment's report_evaluation writes
them, read back as a run's evaluation files."""

from __future__ import annotations

import random
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from mcp_rl.environments.constant_answers import SAMPLE_KEY, constant_scores
from mcp_rl.proof.env_eval import per_item_outcomes
from mcp_rl.proof.outcomes import write_outcomes
from mcp_rl.proof.summary import HeldOutSummary, held_out_summary
from mcp_rl.rundir import eval_outcomes_file

pytestmark = pytest.mark.anyio

N = 60


def letter_counting() -> tuple[list[dict[str, Any]], Any]:
    pytest.importorskip("reasoning_gym")
    from mcp_rl.environments.bundled.reasoning_gym_env import ReasoningGymConfig, ReasoningGymEnv, make_datasets

    config = ReasoningGymConfig(datasets="letter_counting", held_out_size=N, train_size=10)
    _, held = make_datasets(config)
    items = [{"dataset": "letter_counting", "index": i, **held["letter_counting"][i]} for i in range(N)]
    # The environment's own score() and report_evaluation(), on a stand-in holding what they read.
    env = SimpleNamespace(config=config, held_sets=held, train_sets={}, weights={"letter_counting": 1.0}, logged=[])

    async def evaluate_log(metrics: dict[str, float], samples: list[dict[str, Any]], verbose: bool) -> None:
        env.logged.append(samples)

    env.evaluate_log = evaluate_log
    return items, (env, ReasoningGymEnv)


async def samples_of(texts: list[str], items: list[dict[str, Any]], env_and_cls: Any) -> list[dict[str, Any]]:
    env, cls = env_and_cls
    score = lambda text, item: cls.score(env, text, item)  # noqa: E731
    scores = [score(t, item) for t, item in zip(texts, items, strict=True)]
    constants = constant_scores(items, texts, [cls.reference(env, item) for item in items], score)
    await cls.report_evaluation(env, items, texts, scores, constants)
    return env.logged.pop()


def summary_of(run_dir: Path, base: list[dict[str, Any]], trained: list[dict[str, Any]]) -> HeldOutSummary:
    for step, samples in ((0, base), (30, trained)):
        outcomes, _, paired_by = per_item_outcomes(samples)
        assert outcomes is not None and paired_by == "id"
        write_outcomes(eval_outcomes_file(run_dir, step), outcomes)
    summary = held_out_summary(run_dir)
    assert summary is not None and summary.n == N
    return summary


def soup(i: int) -> str:
    """A 32-digit answer holding every digit, a different one per item (no answer repeats)."""
    return "1234567890" + f"{i:022d}"


async def test_digit_soup_is_not_shown_to_have_learned_against_the_graded_soup(tmp_path: Path) -> None:
    items, env = letter_counting()
    base = await samples_of([f"It is {int(it['answer']) + 1}." for it in items], items, env)
    trained = await samples_of([soup(i) for i in range(N)], items, env)
    assert all(set(s[SAMPLE_KEY]) == set(trained[0][SAMPLE_KEY]) for s in trained)  # the same candidates on every item
    summary = summary_of(tmp_path, base, trained)

    assert summary.trained_score is not None and summary.trained_score > summary.base_score
    assert summary.p_value is not None and summary.p_value < 0.05  # the paired test alone would certify it
    constant = summary.constant_baseline
    assert constant is not None and not constant.lower_bound and "environment's own scorer" in constant.source
    assert constant.score >= summary.trained_score - 1e-9
    assert summary.learned is False
    assert summary.sentence.startswith("Not shown to have learned the task") and ". But answering" in summary.sentence
    compared = "more than" if constant.score > summary.trained_score + 1e-9 else "as much as"
    assert f"{compared} the trained model's" in summary.sentence
    assert any(w.startswith("The gain is partial credit") and "0% -> 0%" in w for w in summary.warnings)

    # The same answers without the graded constants: every answer was given once, so the lower bound
    # read from the answers is tiny and the verdict cannot say more than "not shown above it".
    for samples in (base, trained):
        for s in samples:
            del s[SAMPLE_KEY]
    blind = summary_of(tmp_path / "blind", base, trained)
    assert blind.constant_baseline is not None and blind.constant_baseline.lower_bound
    assert blind.learned is None and blind.constant_baseline.score < summary.trained_score / 10


async def test_a_model_that_counts_is_above_the_graded_constants(tmp_path: Path) -> None:
    items, env = letter_counting()
    rng = random.Random(3)
    base = await samples_of([f"It is {int(it['answer']) + 1}." for it in items], items, env)
    right = [str(it["answer"]) if rng.random() < 0.8 else "7" for it in items]
    trained = await samples_of(right, items, env)
    summary = summary_of(tmp_path, base, trained)
    constant = summary.constant_baseline
    assert constant is not None and not constant.lower_bound
    # The most common reference ("1", say) was among the candidates, graded on every item.
    assert constant.candidates >= 4 and summary.learned is True and summary.warnings == []


def test_malformed_constant_scores_are_not_read() -> None:
    rows = [
        {"id": "a", "score": 1.0, "response": "1", SAMPLE_KEY: {"1": 1.0, "  2 ": 0}},
        {"id": "b", "score": 0.0, "response": "2", SAMPLE_KEY: {"1": "high"}},
        {"id": "c", "score": 0.0, "response": "3", SAMPLE_KEY: []},
    ]
    outcomes, _, _ = per_item_outcomes(rows)
    assert outcomes is not None
    assert [o.constants for o in outcomes] == [{"1": 1.0, "2": 0.0}, None, None]


def test_a_candidate_the_scorer_fails_on_is_left_out_of_every_item() -> None:
    def score(text: str, item: int) -> float:
        if text == "boom" and item == 1:
            raise ValueError("cannot take it")
        return float(text == str(item))

    graded = constant_scores([0, 1, 2], ["boom", "boom", "1"], ["0", "1", "2"], score)
    assert all("boom" not in g for g in graded) and [g["1"] for g in graded] == [0.0, 1.0, 0.0]

    def nan_for_two(text: str, item: int) -> float:
        return float("nan") if text == "2" else float(text == str(item))

    graded = constant_scores([0, 1, 2], ["1", "1", "2"], [None, None, None], nan_for_two)
    assert [sorted(g) for g in graded] == [["1"], ["1"], ["1"]]
