"""Issue 44, degeneracy read from the answers (mcp_rl.proof.verdict): answers stopped at
max_tokens, answers that repeat the prompt, each group's own constant answer, an environment's
own evaluate() with per-item answers (a lower-bound constant) or only an aggregate (no baseline,
said). Synthetic evaluation rows, and the marks as the trainer's sampling makes them."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from mcp_rl.proof.env_eval import per_item_outcomes
from mcp_rl.proof.heldout import HeldOutItem, HeldOutSet
from mcp_rl.proof.outcomes import AggregateScore, ItemOutcome, write_aggregate, write_outcomes
from mcp_rl.proof.summary import held_out_summary
from mcp_rl.proof.verdict import (
    AT_LIMIT_SHARE,
    ECHO_SHARE,
    NO_BASELINE_AGGREGATE,
    answer_shape,
    best_constant,
    constant_from_answers,
    repeats_prompt,
    shape_warnings,
)
from mcp_rl.rundir import eval_outcomes_file
from mcp_rl.trainer.backends.base import SampledSequence, Sampler, SamplingRequest
from mcp_rl.trainer.trainer_eval import HeldOutEvaluator, item_outcomes, sample_answers

RNG = random.Random(7)
N = 120
# Two groups: "short" items whose answer is mostly 1, "long" items with answers 2..9.
GROUPS = ["short" if i % 2 else "long" for i in range(N)]
ANSWERS = [("1" if RNG.random() < 0.7 else "2") if g == "short" else str(RNG.randint(2, 9)) for g in GROUPS]
QUESTIONS = [f"Count the vowels in the sentence number {i} of the corpus, please." for i in range(N)]


def exact(text: str, answer: str) -> float:
    return 1.0 if text.strip() == answer else 0.0


def first_number(text: str, answer: str) -> float:
    """A lenient scorer: the first number anywhere in the reply."""
    found = "".join(c if c.isdigit() else " " for c in text).split()
    return 1.0 if found and found[0] == answer else 0.0


def items(grader=exact) -> HeldOutSet:
    return HeldOutSet(
        environment="vowels",
        description=f"{N} items",
        items=[
            HeldOutItem(id=f"q{i}", messages=[{"role": "user", "content": QUESTIONS[i]}], answer=a, group=g)
            for i, (a, g) in enumerate(zip(ANSWERS, GROUPS, strict=True))
        ],
        max_tokens=16,
        grader=grader,
    )


def evaluate(run_dir: Path, step: int, held: HeldOutSet, texts: list[str], at_limit: list[bool] | None = None):
    from mcp_rl.trainer.trainer_eval import SampledAnswer

    marks = at_limit or [False] * len(texts)
    outcomes = item_outcomes(held, [SampledAnswer(t, m) for t, m in zip(texts, marks, strict=True)])
    write_outcomes(eval_outcomes_file(run_dir, step), outcomes)
    ev = HeldOutEvaluator.__new__(HeldOutEvaluator)
    ev.run_dir = run_dir
    ev._write_constant(held, outcomes, step)


def base_answers() -> list[str]:
    rng = random.Random(3)
    return [a if rng.random() < 0.2 else str(rng.randint(0, 9)) for a in ANSWERS]


def genuine() -> list[str]:
    rng = random.Random(4)
    return [a if rng.random() < 0.95 else str(rng.randint(0, 9)) for a in ANSWERS]


# -- prompt echo -------------------------------------------------------------------------------


def test_an_echo_is_the_question_again_not_a_number_that_occurs_in_it() -> None:
    q = "How many times does the letter r appear in strawberry?"
    assert repeats_prompt(q, q)
    assert repeats_prompt(f"Sure!  {q.upper()}\n\nLet me think", q)  # case and whitespace ignored
    assert repeats_prompt("the letter r appear in strawberry", q)  # the greater part of it, unbroken
    assert not repeats_prompt("3", q) and not repeats_prompt("strawberry: 3", q)
    assert not repeats_prompt("", q)
    assert not repeats_prompt("2 + 3", "2 + 3")  # too short a prompt to tell an echo from an answer
    long = "Instructions. " * 100 + "What is the capital of France?"
    assert repeats_prompt(long[:400], long)  # a long prompt: 200 characters of it are enough


def test_answers_repeating_the_prompt_warn_past_the_stated_share(tmp_path: Path) -> None:
    held = items(first_number)
    # The trained model copies the question (whose first number is the item's index) on 40 % of the items.
    trained = [QUESTIONS[i] if i % 5 < 2 else a for i, a in enumerate(genuine())]
    evaluate(tmp_path, 0, held, base_answers())
    evaluate(tmp_path, 30, held, trained)
    summary = held_out_summary(tmp_path)
    assert summary is not None and summary.answers is not None and summary.base_answers is not None
    assert summary.answers.echo_share is not None and abs(summary.answers.echo_share - 0.4) < 0.01
    assert summary.base_answers.echo_share == 0.0
    assert 0.4 >= ECHO_SHARE
    (warning,) = [w for w in summary.warnings if "repeat the prompt" in w]
    assert "40%" in warning and "(the base's: 0%)" in warning and "stricter scorer" in warning


# -- max_tokens --------------------------------------------------------------------------------


def test_answers_cut_at_max_tokens_warn_and_unknown_marks_do_not(tmp_path: Path) -> None:
    held = items()
    cut = [i % 3 == 0 for i in range(N)]  # a third of the trained answers hit the limit
    evaluate(tmp_path, 0, held, base_answers())
    evaluate(tmp_path, 30, held, genuine(), at_limit=cut)
    summary = held_out_summary(tmp_path)
    assert summary is not None and summary.answers is not None
    assert summary.answers.at_limit_share == sum(cut) / N >= AT_LIMIT_SHARE
    assert any("stopped at max_tokens (the base's: 0%)" in w and "max_new_tokens" in w for w in summary.warnings)
    # Rows that do not say (an older run, an evaluate() without finish reasons): None, no warning.
    unknown = answer_shape([str(i) for i in range(20)], [0.0] * 20, 1.0, [None] * 20)
    assert unknown is not None and unknown.at_limit_share is None
    assert shape_warnings(None, unknown, 0.0, 0.0) == []
    # As many cut answers as the base had: not the training's doing, no warning.
    both = answer_shape([str(i) for i in range(20)], [1.0] * 20, 1.0, [True] * 10 + [False] * 10)
    assert not any("max_tokens" in w for w in shape_warnings(both, both, 0.5, 0.6, True))


class CharTokenizer:
    def apply_chat_template(self, messages: list[dict[str, str]], **_: Any) -> str:
        return messages[-1]["content"]

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return [ord(c) for c in text]

    def decode(self, tokens: list[int], skip_special_tokens: bool = True) -> str:
        return "".join(chr(t) for t in tokens if t != 0)


class Rambler(Sampler):
    """Answers the item's first word, or rambles to the limit on items whose id is odd."""

    model_name = "rambler"

    def __init__(self, greedy: bool) -> None:
        self.tokenizer = CharTokenizer()
        self.eos_ids = [0]
        if greedy:
            self.sample_greedy = self._greedy

    def _tokens(self, prompt: list[int], max_tokens: int) -> tuple[list[int], bool]:
        text = self.tokenizer.decode(prompt)
        if "odd" in text:
            return [ord("9")] * max_tokens, True
        return [ord("7"), 0], False  # an answer and the stop token

    def _greedy(self, prompts: list[list[int]], max_tokens: int) -> list[list[int]]:
        return [self._tokens(p, max_tokens)[0] for p in prompts]

    def sample(self, request: SamplingRequest) -> list[SampledSequence]:
        tokens, cut = self._tokens(request.prompt_tokens, request.max_tokens)
        return [SampledSequence(tokens=tokens, logprobs=[0.0] * len(tokens), finish_reason="length" if cut else "stop")]


def test_the_trainers_sampling_marks_answers_stopped_at_max_tokens() -> None:
    held = HeldOutSet(
        environment="x",
        description="4 items",
        items=[
            HeldOutItem(id=str(i), messages=[{"role": "user", "content": w}], answer="7")
            for i, w in enumerate(["even", "odd", "even", "odd"])
        ],
        max_tokens=5,
        grader=exact,
    )
    for greedy in (True, False):
        answers = sample_answers(Rambler(greedy), held)
        assert [a.at_limit for a in answers] == [False, True, False, True], greedy
        assert answers[1].text == "99999" and answers[0].text == "7"

    # A greedy answer exactly as long as the limit that ends with its stop token finished.
    class Exact(Rambler):
        def _tokens(self, prompt: list[int], max_tokens: int) -> tuple[list[int], bool]:
            return [ord("7")] * (max_tokens - 1) + [0], False

    assert [a.at_limit for a in sample_answers(Exact(True), held)] == [False] * 4


# -- per group ---------------------------------------------------------------------------------


def test_a_group_the_model_collapsed_on_is_named_with_its_own_constant(tmp_path: Path) -> None:
    held = items()
    # Learned the "long" items; answers "1" to every "short" item (right on ~70 % of them by the data alone).
    trained = [("1" if g == "short" else a) for g, a in zip(GROUPS, genuine(), strict=True)]
    evaluate(tmp_path, 0, held, base_answers())
    evaluate(tmp_path, 30, held, trained)
    summary = held_out_summary(tmp_path)
    assert summary is not None and summary.learned is True  # run-wide, above any one constant
    short = next(g for g in summary.groups if g.group == "short")
    long_ = next(g for g in summary.groups if g.group == "long")
    assert short.learned is False and short.constant_baseline is not None
    assert short.constant_baseline.answer == "1" and short.constant_baseline.score == short.trained_score
    assert short.answers is not None and short.answers.top_share == 1.0 and short.answers.top_answer == "1"
    assert long_.learned is True
    (warning,) = [w for w in summary.warnings if w.startswith("Group short")]
    assert '"1"' in warning and "not shown learned there" in warning
    assert not any(w.startswith("Group long") for w in summary.warnings)


def test_per_group_constants_come_from_the_same_grades() -> None:
    answers = ["a", "a", "b", "b", "b"]
    groups = ["x", "x", "y", "y", None]
    calls: list[tuple[str, int]] = []

    def grade(text: str, i: int) -> float:
        calls.append((text, i))
        return exact(text, answers[i])

    baseline = best_constant(answers, grade, {"step 0": ["a", "b", "c"]}, None, groups)
    assert baseline is not None and baseline.answer == "b" and baseline.score == 0.6
    assert {k: (v.answer, v.score, v.n) for k, v in baseline.groups.items()} == {"x": ("a", 1.0, 2), "y": ("b", 1.0, 2)}
    assert len(calls) == 3 * 5  # each candidate graded once per item, groups included


# -- an environment's own evaluate() -----------------------------------------------------------


def test_per_item_samples_give_a_lower_bound_constant_and_their_marks(tmp_path: Path) -> None:
    soup = "12345678900222222222222222222222"
    rows = [
        {
            "id": f"r{i}",
            "question": QUESTIONS[i],
            "response": soup,
            "score": 1 / 32 if ANSWERS[i] in soup else 0.0,
            "finish_reason": "length",
        }
        for i in range(N)
    ]
    base = [
        {"id": f"r{i}", "question": QUESTIONS[i], "response": "", "score": 0.0, "finish_reason": "stop"}
        for i in range(N)
    ]
    for step, samples in ((0, base), (30, rows)):
        outcomes, _, _ = per_item_outcomes(samples)
        assert outcomes is not None
        write_outcomes(eval_outcomes_file(tmp_path, step), outcomes)
    summary = held_out_summary(tmp_path)
    assert summary is not None and summary.answers is not None
    assert summary.answers.at_limit_share == 1.0 and summary.answers.echo_share == 0.0
    # No grader here: the soup credited where it was given, which is every item: exactly its score.
    assert summary.constant_baseline is not None and summary.constant_baseline.lower_bound
    assert summary.constant_baseline.answer == soup and summary.learned is False
    assert summary.sentence.startswith("Not shown to have learned the task")
    # A genuine gain read the same way: above the bound, but a bound certifies nothing.
    right = [{"id": f"r{i}", "response": ANSWERS[i], "score": 1.0} for i in range(N)]
    bound = constant_from_answers({"t": [(r["id"], r["response"], 1.0) for r in right]})
    assert bound is not None and bound.score < 1.0 and bound.lower_bound


def test_an_aggregate_only_evaluation_says_no_constant_baseline_can_be_computed(tmp_path: Path) -> None:
    for step, score in ((0, 0.1), (30, 0.4)):
        write_aggregate(tmp_path, AggregateScore(step=step, score=score, n=200, score_key="eval/percent_correct"))
    summary = held_out_summary(tmp_path)
    assert summary is not None and summary.paired is False
    assert summary.learned is None and summary.constant_baseline is None
    assert summary.sentence.endswith(NO_BASELINE_AGGREGATE)
    assert "only an aggregate score" in NO_BASELINE_AGGREGATE and "evaluate_log" in NO_BASELINE_AGGREGATE


def test_a_genuine_gain_with_clean_answers_gets_no_warning(tmp_path: Path) -> None:
    held = items()
    evaluate(tmp_path, 0, held, base_answers())
    evaluate(tmp_path, 30, held, genuine())
    summary = held_out_summary(tmp_path)
    assert summary is not None and summary.learned is True and summary.warnings == []
    assert summary.answers is not None and summary.answers.at_limit_share == 0.0 and summary.answers.echo_share == 0.0
    assert all(g.learned is True for g in summary.groups)
    assert "max_tokens" in summary.thresholds and "prompt echo" in summary.thresholds


def test_rows_written_before_the_marks_still_read(tmp_path: Path) -> None:
    old = [ItemOutcome(item=f"q{i}", score=1.0, completion="1") for i in range(20)]
    write_outcomes(eval_outcomes_file(tmp_path, 0), old)
    write_outcomes(eval_outcomes_file(tmp_path, 5), old)
    summary = held_out_summary(tmp_path)
    assert summary is not None and summary.answers is not None
    assert summary.answers.at_limit_share is None and summary.answers.echo_share is None
