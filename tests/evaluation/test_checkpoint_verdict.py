"""Issue 44: rl_evaluate_checkpoint's verdict is the run's own. The evaluation worker's comparison
of a collapsed checkpoint with its base, on synthetic outcomes, gives the same sentence, constant
baseline, `learned` and warnings as rl_check_status's held_out for the same items in a run folder;
and its sample pairs show each item's reference answer, never the grader's key (a task's index)."""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path

from mcp_rl.evaluation.checkpoint_models import CheckpointInfo, EvalModel, EvalSpec
from mcp_rl.evaluation.worker import EvalWorker, initial_result
from mcp_rl.proof.heldout import HeldOutItem, HeldOutSet
from mcp_rl.proof.outcomes import ItemOutcome, write_outcomes
from mcp_rl.proof.summary import held_out_summary
from mcp_rl.rundir import eval_outcomes_file
from mcp_rl.trainer.trainer_eval import HeldOutEvaluator
from tests.kit.runs import TOY_ENV

RNG = random.Random(7)
# A task's items: the grader gets the item's index; the reference (the true count) is 0 for most.
COUNTS = [RNG.choice([0, 0, 0, 1, 1, 2]) for _ in range(120)]


def task_items() -> HeldOutSet:
    items = [
        HeldOutItem(
            id=f"How many r's in word {i}?",
            messages=[{"role": "user", "content": f"How many r's in word {i}?"}],
            answer=str(i),
            reference=str(c),
        )
        for i, c in enumerate(COUNTS)
    ]
    return HeldOutSet(
        environment="count_r",
        description=f"{len(items)} items",
        items=items,
        max_tokens=8,
        grader=lambda text, index: 1.0 if text.strip() == str(COUNTS[int(index)]) else 0.0,
    )


def outcomes(items: HeldOutSet, texts: list[str]) -> list[ItemOutcome]:
    return [
        ItemOutcome(item=item.id, score=items.grade(item, text), completion=text)
        for item, text in zip(items.items, texts, strict=True)
    ]


def worker(folder: Path, step: int) -> EvalWorker:
    """The worker's state after both models answered (its sampling is not what is tested here)."""
    models = [
        EvalModel(id=f"run:r@{step}", role="trained", kind="local", slug="trained", base_model="m", weights="w"),
        EvalModel(id="base:m", role="base", kind="local", slug="base", base_model="m"),
    ]
    spec = EvalSpec(
        eval_id="e1",
        created_at=time.time(),
        run_id="r",
        step=step,
        environment=TOY_ENV,
        env_config={},
        models=models,
        openrouter_base_url="http://127.0.0.1:1/v1",
    )
    info = CheckpointInfo(model=models[0].id, weights="w", backend="local", base_model="m", final=True)
    w = EvalWorker.__new__(EvalWorker)
    w.dir, w.spec, w.stop = folder, spec, threading.Event()
    w.result = initial_result(spec, info, 0, "items")
    w.outcomes, w.used, w.pricing, w._used_lock = {}, {}, {}, threading.Lock()
    return w


def test_a_collapsed_checkpoint_gets_the_runs_verdict_and_reference_answers(tmp_path: Path) -> None:
    items = task_items()
    base_texts = [RNG.choice(["5", "16", "25", "0", "1"]) for _ in COUNTS]  # wrong mostly, right by chance
    trained_texts = ["0"] * len(COUNTS)  # collapsed to the majority answer
    # The run's own verdict: its evaluations at step 0 and step 30 of the same items.
    run_dir = tmp_path / "run"
    evaluator = HeldOutEvaluator.__new__(HeldOutEvaluator)
    evaluator.run_dir = run_dir
    for step, texts in ((0, base_texts), (30, trained_texts)):
        rows = outcomes(items, texts)
        write_outcomes(eval_outcomes_file(run_dir, step), rows)
        evaluator._write_constant(items, rows, step)
    summary = held_out_summary(run_dir)
    assert summary is not None and summary.learned is False

    folder = tmp_path / "eval"
    folder.mkdir()
    w = worker(folder, 30)
    w.outcomes = {"run:r@30": outcomes(items, trained_texts), "base:m": outcomes(items, base_texts)}
    w._compare({item.id: item.reference for item in items.items})
    w._judge(items)
    w.write("completed")
    result = w.result
    assert result.sentence is not None and result.sentence.startswith("Not shown to have learned the task")
    # The same words around the paired test's own sentence (which names the models its way).
    (comparison,) = result.comparisons
    assert comparison.stats.sentence in result.sentence
    assert result.sentence.split(" But ", 1)[1] == summary.sentence.split(" But ", 1)[1]
    assert (result.learned, result.warnings) == (summary.learned, summary.warnings)
    assert result.constant_baseline is not None and summary.constant_baseline is not None
    assert (result.constant_baseline.answer, result.constant_baseline.score) == ("0", summary.constant_baseline.score)
    assert result.answers == summary.answers and result.base_answers == summary.base_answers
    assert any("answer collapse" in w for w in result.warnings)
    # The message an agent reads carries the verdict and its warnings, not the bare test.
    assert result.message.startswith("Not shown to have learned the task") and "answer collapse" in result.message
    # Sample pairs: the item's reference answer (the true count), not its index.
    assert comparison.samples
    for sample in comparison.samples:
        index = next(i for i, item in enumerate(items.items) if item.id == sample.item)
        assert sample.answer == str(COUNTS[index])


def test_a_genuine_gain_reads_above_the_constant_with_no_warning(tmp_path: Path) -> None:
    items = task_items()
    base_texts = ["7"] * len(COUNTS)
    trained_texts = [str(c) if i % 10 else "9" for i, c in enumerate(COUNTS)]  # right on 90 %
    w = worker(tmp_path, 4)
    w.outcomes = {"run:r@4": outcomes(items, trained_texts), "base:m": outcomes(items, base_texts)}
    w._compare({item.id: item.reference for item in items.items})
    w._judge(items)
    assert w.result.learned is True and w.result.warnings == []
    assert w.result.sentence is not None and "the model is above it" in w.result.sentence


def test_without_a_base_comparison_there_is_no_verdict(tmp_path: Path) -> None:
    items = task_items()
    w = worker(tmp_path, 4)
    w.outcomes = {"run:r@4": outcomes(items, ["0"] * len(COUNTS))}  # the base failed
    w._compare({})
    w._judge(items)
    assert w.result.sentence is None and w.result.learned is None and w.result.warnings == []
