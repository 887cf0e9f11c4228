"""`eval/step_{S:06d}.jsonl` of a run folder: one line per held-out item of the evaluation taken
at step S (the item's id, its score, the model's completion), written atomically once the whole
evaluation is done. Stdlib and pydantic only (the trainer writes it, the server reads it)."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from mcp_rl.atomic import write_text_atomic
from mcp_rl.proof.verdict import ConstantBaseline
from mcp_rl.rundir import EVAL_DIR, read_jsonl

# A completion longer than this is cut in the file (the score was taken on the whole text).
COMPLETION_CHARS = 2000


class ItemOutcome(BaseModel):
    model_config = ConfigDict(extra="allow")

    item: str
    score: float
    completion: str = ""
    group: str | None = None  # the item's label (a mixture's dataset), when the environment gives one
    # Its generation stopped at max_tokens, cut before it ended (None: the evaluation cannot tell).
    at_limit: bool | None = None
    # The completion repeats the item's prompt (mcp_rl.proof.verdict.repeats_prompt; None: prompt unknown).
    echo: bool | None = None
    # What a few constant answers score on this item by the environment's own scorer, when its own
    # evaluate() graded them (mcp_rl.environments.constant_answers); None: not graded there.
    constants: dict[str, float] | None = None


def write_outcomes(path: Path, outcomes: list[ItemOutcome]) -> None:
    """All lines or none: a temporary file renamed over `path`."""
    lines = []
    for outcome in outcomes:
        row = outcome.model_dump()
        if row.get("constants") is None:
            row.pop("constants", None)  # most evaluations carry none: no field on every line
        row["completion"] = row["completion"][:COMPLETION_CHARS]
        lines.append(json.dumps(row, ensure_ascii=False) + "\n")
    write_text_atomic(path, "".join(lines))


def read_outcomes(path: Path) -> list[ItemOutcome]:
    """The outcomes in `path` (missing file: none); malformed lines are skipped."""
    out = []
    for row in read_jsonl(path).rows:
        try:
            out.append(ItemOutcome.model_validate(row))
        except ValidationError:
            continue
    return out


def evaluated_steps(run_dir: Path) -> list[int]:
    """Steps with an outcomes file, ascending."""
    found = []
    for path in (run_dir / EVAL_DIR).glob("step_*.jsonl"):
        try:
            found.append(int(path.stem.removeprefix("step_")))
        except ValueError:
            continue
    return sorted(found)


# An evaluation with no per-item outcomes (an environment's own evaluate() that reports only
# metrics): `eval/step_{S:06d}.aggregate.json`, its headline score and item count.
AGGREGATE_SUFFIX = ".aggregate.json"


class AggregateScore(BaseModel):
    model_config = ConfigDict(extra="allow")

    step: int
    score: float
    n: int | None = None
    score_key: str | None = None


def aggregate_file(run_dir: Path, step: int) -> Path:
    return run_dir / EVAL_DIR / f"step_{step:06d}{AGGREGATE_SUFFIX}"


def write_aggregate(run_dir: Path, aggregate: AggregateScore) -> None:
    path = aggregate_file(run_dir, aggregate.step)
    write_text_atomic(path, aggregate.model_dump_json())


def read_aggregates(run_dir: Path) -> list[AggregateScore]:
    """The run's aggregate-only evaluations by step (unreadable files are skipped)."""
    found = []
    for path in (run_dir / EVAL_DIR).glob(f"step_*{AGGREGATE_SUFFIX}"):
        try:
            found.append(AggregateScore.model_validate_json(path.read_text(encoding="utf-8")))
        except (OSError, ValidationError):
            continue
    return sorted(found, key=lambda a: a.step)


# What an environment's own evaluate() figures are and where they came from (the metric, its
# source, n's source), in words: `eval/measure.txt`, the latest evaluation's.
MEASURE_FILE = "measure.txt"


def write_measure(run_dir: Path, text: str) -> None:
    write_text_atomic(run_dir / EVAL_DIR / MEASURE_FILE, text)


def read_measure(run_dir: Path) -> str | None:
    try:
        return (run_dir / EVAL_DIR / MEASURE_FILE).read_text(encoding="utf-8").strip() or None
    except OSError:
        return None


# What the best constant answer scores on the items of the evaluation at step S (mcp_rl.proof.verdict):
# `eval/step_{S:06d}.constant.json`.
CONSTANT_SUFFIX = ".constant.json"


def constant_file(run_dir: Path, step: int) -> Path:
    return run_dir / EVAL_DIR / f"step_{step:06d}{CONSTANT_SUFFIX}"


def write_constant(run_dir: Path, step: int, baseline: ConstantBaseline) -> None:
    write_text_atomic(constant_file(run_dir, step), baseline.model_dump_json())


def read_constant(run_dir: Path, step: int) -> ConstantBaseline | None:
    try:
        return ConstantBaseline.model_validate_json(constant_file(run_dir, step).read_text(encoding="utf-8"))
    except (OSError, ValidationError):
        return None


# How the evaluation at step S sampled its items: `eval/step_{S:06d}.sampling.json`. A checkpoint
# evaluation reuses the run's step-0 outcomes for the base only when its own sampling is the same
# (mcp_rl.evaluation.worker); a run folder without this file is never reused.
SAMPLING_SUFFIX = ".sampling.json"


class EvalSampling(BaseModel):
    model_config = ConfigDict(extra="allow")

    step: int
    max_tokens: int
    temperature: float
    base_model: str  # run.yaml's base model
    model_dir: str | None = None  # the local folder the sampler loaded (None: a remote model)
    init_from: str | None = None  # a checkpoint of an earlier run the weights started from
    items: int


def sampling_file(run_dir: Path, step: int) -> Path:
    return run_dir / EVAL_DIR / f"step_{step:06d}{SAMPLING_SUFFIX}"


def write_sampling(run_dir: Path, sampling: EvalSampling) -> None:
    write_text_atomic(sampling_file(run_dir, sampling.step), sampling.model_dump_json())


def read_sampling(run_dir: Path, step: int) -> EvalSampling | None:
    try:
        return EvalSampling.model_validate_json(sampling_file(run_dir, step).read_text(encoding="utf-8"))
    except (OSError, ValidationError):
        return None
