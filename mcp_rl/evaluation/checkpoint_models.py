"""The files of a checkpoint evaluation (rl_evaluate_checkpoint), as pydantic models.

    evaluations/<eval_id>/spec.json        EvalSpec: what to evaluate (written once; no secrets)
    evaluations/<eval_id>/worker.json      the detached worker's pid, start time (and marker)
    evaluations/<eval_id>/result.json      EvaluationResult: rewritten atomically as it progresses
    evaluations/<eval_id>/outcomes/<slug>.jsonl   per-item outcomes of one model (item, score, completion)
    evaluations/<eval_id>/worker.log

Stdlib and pydantic only (and the cost models of mcp_rl.costs.evaluation, themselves pydantic).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from mcp_rl.background import JOB_ID_RE
from mcp_rl.costs.evaluation import EvaluationCost, ModelPricing
from mcp_rl.proof.stats import PairedComparison
from mcp_rl.proof.verdict import AnswerShape, ConstantBaseline, Verdict
from mcp_rl.runconfig import EnvironmentRef

SPEC_FILE = "spec.json"
RESULT_FILE = "result.json"
WORKER_LOG = "worker.log"
OUTCOMES_DIR = "outcomes"
EVAL_ID_RE = JOB_ID_RE
_VERDICT = Verdict.model_fields

ModelKind = Literal["local", "tinker", "openrouter"]
ModelRole = Literal["trained", "base", "other"]
ModelState = Literal["pending", "running", "done", "failed"]
# stopped: its cost cap was reached; refused: nothing started (the estimate needs a yes or a cap).
EvalState = Literal["running", "completed", "failed", "cancelled", "stopped", "refused"]


class EvalModel(BaseModel):
    """One model of an evaluation and how the worker samples it."""

    id: str = Field(description="run:<run_id>@<step>, 'base:<base model>', or an OpenRouter id.")
    role: ModelRole
    kind: ModelKind
    slug: str
    base_model: str | None = Field(default=None, description="Local folder or Tinker base model name.")
    weights: str | None = Field(
        default=None, description="Local: the LoRA adapter folder; Tinker: the checkpoint's sampler path."
    )
    tokenizer: str | None = Field(default=None, description="A local tokenizer folder (Tinker models).")


class EvalSpec(BaseModel):
    eval_id: str
    created_at: float
    run_id: str
    step: int
    environment: EnvironmentRef
    env_config: dict[str, object]
    # The run's held_out_limit: its first N held-out items, as its trainer evaluated (None: all).
    held_out_limit: int | None = None
    models: list[EvalModel]
    samples_per_comparison: int = 3
    openrouter_base_url: str
    # mcp_rl.costs.evaluation: each model's rates, and the evaluation's own cap (None: no cap).
    pricing: list[ModelPricing] = []
    max_cost_usd: float | None = None
    # The environment has no items mcp-rl knows: its own evaluate() is run against each model
    # served in turn (mcp_rl.proof.env_eval), with the run's server settings (`openai`).
    own_evaluate: bool = False
    openai: list[dict[str, object]] = []
    # A local run: its folder and run.yaml's base model. The worker reuses the run's step-0
    # outcomes for the base when that evaluation sampled exactly what it would (worker._reused_base).
    run_dir: str | None = None
    run_base_model: str | None = None


class ModelProgress(BaseModel):
    model: str
    role: ModelRole
    state: ModelState = "pending"
    done: int = Field(default=0, description="Items answered so far.")
    total: int = 0
    score: float | None = Field(default=None, description="Mean score over the held-out items (when done).")
    seconds: float | None = None
    error: str | None = None
    outcomes_file: str | None = None
    note: str | None = Field(
        default=None,
        description="How its answers were had when not decoded here, e.g. reused from the run's step-0 evaluation.",
    )


class SamplePair(BaseModel):
    item: str
    answer: str | None = Field(
        default=None,
        description="The item's reference answer (None: the environment gives none, e.g. a task without reference()).",
    )
    trained_completion: str
    trained_score: float
    other_completion: str
    other_score: float


class Comparison(BaseModel):
    """The trained checkpoint against one other model, item by item."""

    trained: str
    against: str
    stats: PairedComparison
    improved: list[str] = Field(description="Items the trained checkpoint did better on (first 20).")
    regressed: list[str] = Field(description="Items it did worse on (first 20).")
    improved_count: int
    regressed_count: int
    samples: list[SamplePair] = Field(description="A few items that flipped (both ways), with both completions.")


class CheckpointInfo(BaseModel):
    model: str = Field(description="run:<run_id>@<step>")
    weights: str = Field(description="Local: the adapter folder; Tinker: the sampler weights' tinker:// path.")
    backend: Literal["local", "tinker"]
    base_model: str
    final: bool
    tinker_openai_model: str | None = Field(
        default=None,
        description="Tinker runs: the model name of this checkpoint on Tinker's OpenAI-compatible endpoint.",
    )
    tinker_openai_base_url: str | None = Field(
        default=None, description="Tinker runs: that endpoint (any OpenAI client, with your TINKER_API_KEY)."
    )


class EvaluationResult(BaseModel):
    eval_id: str
    state: EvalState
    run_id: str
    step: int
    environment: str
    items: int = Field(description="Held-out items every model answers (the same items, paired).")
    held_out: str = Field(description="What the held-out items are.")
    checkpoint: CheckpointInfo
    models: list[ModelProgress]
    comparisons: list[Comparison] = []
    started_at: float
    updated_at: float
    finished_at: float | None = None
    elapsed_s: float
    message: str
    estimated_cost: dict[str, Any] | None = Field(
        default=None,
        description="The estimate made before it started (label 'estimated'): tokens and USD per model, with drivers.",
    )
    cost: EvaluationCost | None = Field(
        default=None,
        description="What it has cost so far: metered tokens at the models' rates (estimated) and OpenRouter's "
        "reported usage.cost beside them.",
    )
    # The verdict on the checkpoint against its base, beside the best constant answer: the same
    # fields, sentence and warnings as rl_check_status's held_out (mcp_rl.proof.verdict.judge).
    sentence: str | None = Field(
        default=None,
        description="The checkpoint against its base: " + str(_VERDICT["sentence"].description),
    )
    learned: bool | None = Field(default=None, description=_VERDICT["learned"].description)
    constant_baseline: ConstantBaseline | None = Field(
        default=None, description=_VERDICT["constant_baseline"].description
    )
    answers: AnswerShape | None = Field(default=None, description=_VERDICT["answers"].description)
    base_answers: AnswerShape | None = Field(default=None, description=_VERDICT["base_answers"].description)
    warnings: list[str] = Field(default_factory=list, description=_VERDICT["warnings"].description)
