"""Issue 44: held-out figures beside their trivial baselines (mcp_rl.proof.verdict), on
synthetic evaluation rows: a constant-answer model, a majority-answer tie, partial-credit digit
soup, and a genuine gain that gets no warning."""

from __future__ import annotations

import random
from pathlib import Path

from mcp_rl.proof.heldout import HeldOutItem, HeldOutSet
from mcp_rl.proof.outcomes import ItemOutcome, read_constant, write_outcomes
from mcp_rl.proof.summary import held_out_summary
from mcp_rl.proof.verdict import answer_shape, best_constant, shape_warnings, verdict_sentence
from mcp_rl.rundir import eval_outcomes_file
from mcp_rl.trainer.trainer_eval import HeldOutEvaluator

# "How many r's in <word>?": the true counts of 200 items, 0 for 36 % of them (as in the run).
RNG = random.Random(44)
COUNTS = [RNG.choice([0] * 36 + [1] * 40 + [2] * 20 + [3] * 4) for _ in range(200)]


def exact(text: str, answer: str) -> float:
    return 1.0 if text.strip() == answer else 0.0


def lenient(text: str, answer: str) -> float:
    """reasoning-gym's letter counting: len(oracle)/len(answer) when the oracle is a substring."""
    text = text.strip()
    if text == answer:
        return 1.0
    return len(answer) / len(text) if answer in text else 0.0


def held_out(grader=exact) -> HeldOutSet:
    items = [
        HeldOutItem(id=f"w{i}", messages=[{"role": "user", "content": f"word {i}"}], answer=str(c), reference=str(c))
        for i, c in enumerate(COUNTS)
    ]
    return HeldOutSet(environment="count", description="200 items", items=items, max_tokens=16, grader=grader)


def write_eval(run_dir: Path, step: int, answers: list[str], items: HeldOutSet) -> list[ItemOutcome]:
    outcomes = [
        ItemOutcome(item=item.id, score=items.grade(item, text), completion=text, group=item.group)
        for item, text in zip(items.items, answers, strict=True)
    ]
    write_outcomes(eval_outcomes_file(run_dir, step), outcomes)
    return outcomes


def evaluator(run_dir: Path) -> HeldOutEvaluator:
    ev = HeldOutEvaluator.__new__(HeldOutEvaluator)  # only the run folder is needed for the baseline
    ev.run_dir = run_dir
    return ev


def run(tmp_path: Path, base: list[str], trained: list[str], items: HeldOutSet):
    for step, answers in ((0, base), (30, trained)):
        outcomes = write_eval(tmp_path, step, answers, items)
        evaluator(tmp_path)._write_constant(items, outcomes, step)
    summary = held_out_summary(tmp_path)
    assert summary is not None
    return summary


def noisy_base() -> list[str]:
    # The base: right on a tenth of the items, else a wrong count (the item's index, as in the issue).
    rng = random.Random(1)
    return [str(c) if rng.random() < 0.1 else rng.choice(["5", "16", "25"]) for c in COUNTS]


def test_a_model_that_answers_one_constant_is_not_shown_to_have_learned(tmp_path: Path) -> None:
    items = held_out()
    summary = run(tmp_path, noisy_base(), ["0"] * len(COUNTS), items)
    zeros = sum(1 for c in COUNTS if c == 0) / len(COUNTS)
    assert summary.trained_score == zeros and summary.trained_score > summary.base_score
    assert summary.p_value is not None and summary.p_value < 0.05  # the paired test alone would certify it
    assert summary.learned is False
    assert summary.constant_baseline is not None and summary.constant_baseline.answer == "0"
    assert summary.constant_baseline.score == zeros
    assert summary.sentence.startswith("Not shown to have learned the task")
    assert f"{zeros:.2f}" in summary.sentence and "constant answer also achieves is not learning" in summary.sentence
    assert any("answer collapse" in w and '"0"' in w for w in summary.warnings)
    assert summary.answers is not None and summary.answers.top_share == 1.0


def test_a_task_whose_answers_are_indices_still_gets_the_models_constant(tmp_path: Path) -> None:
    # A task's grader is given item indices, never candidates; without reference() the model's own
    # answers are the only ones.
    by_index = [str(c) for c in COUNTS]
    items = held_out().model_copy(
        update={
            "items": [
                it.model_copy(update={"answer": str(i), "reference": None}) for i, it in enumerate(held_out().items)
            ],
            "grader": lambda text, index: exact(text, by_index[int(index)]),
        }
    )
    summary = run(tmp_path, noisy_base(), ["0"] * len(COUNTS), items)
    assert summary.learned is False and summary.constant_baseline is not None
    assert summary.constant_baseline.answer == "0"
    baseline = read_constant(tmp_path, 30)
    assert baseline is not None and baseline.source.startswith("the most common answer")


def test_a_majority_tie_picks_one_best_constant_and_the_score_is_that_share() -> None:
    answers = ["1", "1", "2", "2", "3"]
    baseline = best_constant(answers, lambda text, i: exact(text, answers[i]), {"step 0": ["9"] * 5}, answers)
    assert baseline is not None and baseline.answer in {"1", "2"} and baseline.score == 0.4
    assert baseline.candidates == 4  # "9", "1", "2", "3"


def test_partial_credit_digit_soup_is_named_and_beats_no_constant(tmp_path: Path) -> None:
    items = held_out(lenient)
    soup = "12345678900222222222222222222222"
    base = ["I think it is seven"] * len(COUNTS)
    summary = run(tmp_path, base, [soup] * len(COUNTS), items)
    assert summary.trained_score is not None and 0 < summary.trained_score < 0.05
    assert summary.learned is False  # the soup itself, given to every item, scores the same
    assert any(w.startswith("The gain is partial credit") and "0% -> 0%" in w for w in summary.warnings)


def test_a_genuine_gain_gets_no_warning_and_is_above_the_constant(tmp_path: Path) -> None:
    items = held_out()
    rng = random.Random(2)
    trained = [str(c) if rng.random() < 0.8 else "7" for c in COUNTS]
    summary = run(tmp_path, noisy_base(), trained, items)
    assert summary.learned is True and summary.warnings == []
    assert summary.constant_baseline is not None
    assert summary.trained_score is not None and summary.trained_score > summary.constant_baseline.score
    assert "the model is above it" in summary.sentence and not summary.sentence.startswith("Not shown")


def test_the_sentence_without_a_baseline_is_the_tests_own() -> None:
    assert verdict_sentence("On 5 items ...", 0.5, None) == "On 5 items ..."


def test_a_collapse_warns_unless_the_model_is_above_the_constant_and_short_evaluations_do_not() -> None:
    mostly_zero = answer_shape(["0"] * 50 + ["1"] * 10, [1.0] * 60)
    assert mostly_zero is not None and mostly_zero.distinct_share == 2 / 60
    assert any("answer collapse" in w for w in shape_warnings(None, mostly_zero, 0.0, 1.0, above_constant=False))
    assert any("answer collapse" in w for w in shape_warnings(None, mostly_zero, 0.0, 1.0, above_constant=None))
    # Right on every item of a task whose answers are mostly 0: learned, no warning.
    assert shape_warnings(None, mostly_zero, 0.0, 1.0, above_constant=True) == []
    tiny = answer_shape(["0"] * 5, [1.0] * 5)
    assert shape_warnings(None, tiny, 0.0, 1.0) == []


TASK = '''
from mcp_rl.task import Task


class CountR(Task):
    """How many r's."""

    name = "count_r"

    def train_items(self):
        return [{"prompt": f"How many r's in {w}?", "answer": str(w.count("r"))} for w in ("rare", "tree", "sky")]

    def held_out_items(self):
        words = ("arrr", "red", "blue", "carrot", "bird", "sun")
        return [{"prompt": f"How many r's in {w}?", "answer": str(w.count("r"))} for w in words]

    def prompt(self, item):
        return item["prompt"]

    def score(self, completion, item):
        return 1.0 if completion.strip() == item["answer"] else 0.0

    def metadata(self, item):
        return {"count": int(item["answer"])}
'''


def test_a_tasks_metadata_groups_its_held_out_figures(tmp_path: Path) -> None:
    # Issue 44: a task returning {"count": n} got `groups: []`; metadata(item) was never read.
    from mcp_rl.proof.heldout import held_out_set
    from mcp_rl.runconfig import EnvironmentRef

    (tmp_path / "count_r.py").write_text(TASK)
    ref = EnvironmentRef(name="count_r", class_name="CountR", file_path=tmp_path / "count_r.py", project_root=tmp_path)
    items = held_out_set(ref, {})
    assert [i.group for i in items.items] == ["count=3", "count=1", "count=0", "count=2", "count=1", "count=0"]
    # The grader's key is the item's index; the reference shown and tried is the task's own answer.
    assert [i.answer for i in items.items] == ["0", "1", "2", "3", "4", "5"]
    assert [i.reference for i in items.items] == items.references() == ["3", "1", "0", "2", "1", "0"]
    run_dir = tmp_path / "run"
    run(run_dir, ["9"] * 6, ["0"] * 6, items)
    summary = held_out_summary(run_dir)
    assert summary is not None and {g.group for g in summary.groups} == {"count=0", "count=1", "count=2", "count=3"}
    zero = next(g for g in summary.groups if g.group == "count=0")
    assert zero.trained_score == 1.0 and zero.base_score == 0.0
