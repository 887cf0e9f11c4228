"""Issue 44: rl_evaluate_checkpoint reuses the run's own step-0 outcomes for the base when they are
exactly what decoding the base again would give (the run's base folder alone, greedy, the same
max_tokens, the same items in the same order), and decodes again when anything differs. The
verdict and the comparison are the same either way.

The step-0 outcomes are written by the trainer's own evaluation (HeldOutEvaluator.evaluate, the
sampling record beside them); the worker samples through the trainer's sample_answers. Only the
model is a stand-in: a greedy "decoder" whose answer depends on the prompt alone."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from mcp_rl.evaluation.checkpoint_models import CheckpointInfo, EvalModel, EvalSpec
from mcp_rl.evaluation.worker import REUSED_NOTE, EvalWorker, initial_result
from mcp_rl.proof.heldout import HeldOutItem, HeldOutSet
from mcp_rl.proof.outcomes import read_outcomes, read_sampling
from mcp_rl.rundir import eval_outcomes_file
from mcp_rl.trainer.trainer_eval import HeldOutEvaluator
from tests.kit.runs import TOY_ENV

N = 40


class Tokenizer:
    def apply_chat_template(self, messages: list[dict[str, str]], **_: Any) -> str:
        return messages[-1]["content"]

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return [ord(c) for c in text]

    def decode(self, tokens: list[int], skip_special_tokens: bool = True) -> str:
        return "".join(chr(t) for t in tokens)


class GreedyModel:
    """Deterministic answers: the base says the last digit of the item number, the trained model
    the right answer on most items. Counts the prompts it decoded."""

    def __init__(self, model_dir: Path, trained: bool) -> None:
        self.model_dir = model_dir
        self.trained = trained
        self.tokenizer = Tokenizer()
        self.eos_ids: list[int] = []
        self.decoded = 0

    def sample_greedy(self, prompts: list[list[int]], max_tokens: int) -> list[list[int]]:
        self.decoded += len(prompts)
        out = []
        for prompt in prompts:
            n = int("".join(chr(t) for t in prompt).split()[-1].rstrip("?"))
            answer = str(n % 3) if self.trained and n % 5 else str(n % 10)
            out.append([ord(c) for c in answer][:max_tokens])
        return out


def items(n: int = N, max_tokens: int = 8) -> HeldOutSet:
    rows = [
        HeldOutItem(
            id=f"q{i}",
            messages=[{"role": "user", "content": f"What is item {i}?"}],
            answer=str(i % 3),
            reference=str(i % 3),
        )
        for i in range(n)
    ]
    return HeldOutSet(
        environment="toy",
        description=f"{n} items",
        items=rows,
        max_tokens=max_tokens,
        grader=lambda text, answer: 1.0 if text.strip() == answer else 0.0,
    )


def run_step_0(run_dir: Path, model_dir: Path, held_out: HeldOutSet, init_from: str | None = None) -> None:
    """The run's own evaluation of its base before training (the trainer's code)."""
    evaluator = HeldOutEvaluator.__new__(HeldOutEvaluator)
    evaluator.config = SimpleNamespace(trainer=SimpleNamespace(base_model="m", init_from=init_from))  # type: ignore[assignment]
    evaluator.run_dir = run_dir
    evaluator._set, evaluator._unavailable, evaluator._own_evaluate = held_out, None, False
    assert evaluator.evaluate(GreedyModel(model_dir, trained=False), 0)


def worker(folder: Path, run_dir: Path, model_dir: Path) -> tuple[EvalWorker, dict[str, GreedyModel]]:
    models = [
        EvalModel(id="run:r@4", role="trained", kind="local", slug="trained", base_model=str(model_dir), weights="w"),
        EvalModel(id="base:m", role="base", kind="local", slug="base", base_model=str(model_dir)),
    ]
    spec = EvalSpec(
        eval_id="e1",
        created_at=time.time(),
        run_id="r",
        step=4,
        environment=TOY_ENV,
        env_config={},
        models=models,
        openrouter_base_url="http://127.0.0.1:1/v1",
        run_dir=str(run_dir),
        run_base_model="m",
    )
    info = CheckpointInfo(model=models[0].id, weights="w", backend="local", base_model="m", final=True)
    w = EvalWorker.__new__(EvalWorker)
    w.dir, w.spec, w.stop = folder, spec, threading.Event()
    w.result = initial_result(spec, info, 0, "items")
    w.outcomes, w.used, w.pricing, w._used_lock = {}, {}, {}, threading.Lock()
    samplers: dict[str, GreedyModel] = {}

    def local_sampler(model: EvalModel) -> GreedyModel:
        samplers[model.id] = GreedyModel(Path(str(model.base_model)), trained=model.weights is not None)
        return samplers[model.id]

    w._local_sampler = local_sampler  # type: ignore[method-assign]
    return w, samplers


def evaluate(w: EvalWorker, held_out: HeldOutSet) -> None:
    for index, model in enumerate(w.spec.models):
        w._evaluate(index, model, held_out)
        w._compare({item.id: item.reference for item in held_out.items})
    w._judge(held_out)
    w.write("completed")


def test_the_runs_step_0_outcomes_stand_for_the_base_and_the_verdict_is_unchanged(tmp_path: Path) -> None:
    run_dir, model_dir = tmp_path / "run", tmp_path / "model"
    model_dir.mkdir()
    run_step_0(run_dir, model_dir, items())
    sampling = read_sampling(run_dir, 0)
    assert sampling is not None and sampling.model_dir == str(model_dir) and sampling.max_tokens == 8

    (tmp_path / "a").mkdir()
    reusing, samplers = worker(tmp_path / "a", run_dir, model_dir)
    evaluate(reusing, items())
    assert set(samplers) == {"run:r@4"}  # the base was never loaded nor decoded
    base = reusing.result.models[1]
    assert base.state == "done" and base.note == REUSED_NOTE and base.done == N
    assert reusing.result.models[0].note is None
    assert reusing.outcomes["base:m"] == read_outcomes(eval_outcomes_file(run_dir, 0))

    # The same evaluation with the base decoded again: the same figures, comparison and verdict.
    (tmp_path / "b").mkdir()
    decoding, samplers = worker(tmp_path / "b", tmp_path / "no-run", model_dir)
    evaluate(decoding, items())
    assert samplers["base:m"].decoded == N and decoding.result.models[1].note is None
    assert decoding.outcomes["base:m"] == reusing.outcomes["base:m"]
    a, b = reusing.result, decoding.result
    assert a.comparisons[0].stats == b.comparisons[0].stats
    assert (a.sentence, a.learned, a.warnings, a.constant_baseline) == (
        b.sentence,
        b.learned,
        b.warnings,
        b.constant_baseline,
    )
    assert a.sentence is not None and a.learned is True
    assert a.models[1].score == b.models[1].score


@pytest.mark.parametrize(
    ("case", "step_0_items", "evaluated_items"),
    [
        ("held_out_limit differs", items(N), items(N).limited(N - 5)),
        ("another item set", items(N), items(N + 3)),
        ("max_tokens differs", items(N), items(N, max_tokens=16)),
        ("not greedy", items(N), items(N).model_copy(update={"temperature": 0.7})),
    ],
)
def test_the_base_is_decoded_again_when_the_items_or_sampling_differ(
    tmp_path: Path, case: str, step_0_items: HeldOutSet, evaluated_items: HeldOutSet
) -> None:
    run_dir, model_dir = tmp_path / "run", tmp_path / "model"
    model_dir.mkdir()
    run_step_0(run_dir, model_dir, step_0_items)
    w, samplers = worker(tmp_path, run_dir, model_dir)
    if evaluated_items.temperature:  # the stand-in decodes greedily only: a sampled base is not decoded here
        assert w._reused_base(w.spec.models[1], evaluated_items) is None, case
        return
    evaluate(w, evaluated_items)
    assert samplers["base:m"].decoded == len(evaluated_items.items), case
    assert w.result.models[1].note is None


def test_the_base_is_decoded_again_for_another_model_or_an_earlier_runs_weights(tmp_path: Path) -> None:
    run_dir, model_dir, other = tmp_path / "run", tmp_path / "model", tmp_path / "other"
    model_dir.mkdir()
    other.mkdir()
    run_step_0(run_dir, model_dir, items())
    base = EvalModel(id="base:m", role="base", kind="local", slug="base", base_model=str(model_dir))
    w, _ = worker(tmp_path, run_dir, model_dir)
    assert w._reused_base(base, items()) is not None  # the control: this one is reused
    assert w._reused_base(base.model_copy(update={"base_model": str(other)}), items()) is None
    assert w._reused_base(base.model_copy(update={"kind": "tinker"}), items()) is None
    assert w._reused_base(EvalModel(id="x/y", role="other", kind="openrouter", slug="x"), items()) is None
    w.spec = w.spec.model_copy(update={"run_base_model": "another"})  # run.yaml's base changed since
    assert w._reused_base(base, items()) is None
    # a run that started from an earlier run's checkpoint: its step 0 is not the base
    run_step_0(run_dir, model_dir, items(), init_from="/runs/old/checkpoints/step_000010")
    w, _ = worker(tmp_path, run_dir, model_dir)
    assert w._reused_base(base, items()) is None
