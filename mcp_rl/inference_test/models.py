"""The files of an inference test, as pydantic models.

    tests/<test_id>/test.json          TestSpec: what to run (written once by the service; no secrets)
    tests/<test_id>/worker.json        WorkerRecord: the detached worker's pid and start time
    tests/<test_id>/summary.json       InferenceTestResult: rewritten atomically as models progress
    tests/<test_id>/<slug>/result.json ModelResult of one model, written when it finishes
    tests/<test_id>/<slug>/{config.yaml,groups.jsonl,groups.html,process.log}

Result keys follow the original Hermes `rl_test_inference` where they fit (reference/upstream.md
section 1: models_tested, summary.best_model, accuracy, steps_with_correct, ...).
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from mcp_rl.atomic import write_text_atomic
from mcp_rl.background import JOB_ID_RE, WORKER_FILE, WorkerRecord  # noqa: F401  (re-exported: the test worker's record)
from mcp_rl.model_specs import ModelSpec, Provider
from mcp_rl.runconfig import EnvironmentRef

# over_budget: the model used up its request or token budget and was stopped (see usage).
ModelState = Literal["pending", "running", "succeeded", "failed", "timed_out", "over_budget", "cancelled"]
TestState = Literal["running", "completed", "failed", "cancelled"]
FINAL_MODEL_STATES: frozenset[str] = frozenset({"succeeded", "failed", "timed_out", "over_budget", "cancelled"})

TEST_ID_RE = JOB_ID_RE
SLUG_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")

SPEC_FILE = "test.json"
SUMMARY_FILE = "summary.json"
WORKER_LOG = "worker.log"
LOCAL_SERVER_LOG = "local_server.log"
LOCAL_SERVER_FILE = "local_server.json"  # a WorkerRecord of the local model server
# A run checkpoint's server: local_server-<model slug>.json / .log.
LOCAL_SERVER_GLOB = "local_server*.json"
MODEL_RESULT_FILE = "result.json"
MODEL_CONFIG_FILE = "config.yaml"
MODEL_JSONL = "groups.jsonl"
MODEL_HTML = "groups.html"  # Atropos writes `<jsonl stem>.html` next to the JSONL
MODEL_LOG = "process.log"


def test_uri(test_id: str) -> str:
    return f"rl://tests/{test_id}"


def model_uri(test_id: str, slug: str, part: str | None = None) -> str:
    base = f"rl://tests/{test_id}/{slug}"
    return f"{base}/{part}" if part else base


class ModelUsage(BaseModel):
    """What one model's requests cost, counted by the test's gateway."""

    requests: int = Field(default=0, description="Requests sent to the provider (retries included).")
    retries: int = Field(
        default=0, description="Of those, repeats after a rate limit, provider error or lost connection."
    )
    refused: int = Field(default=0, description="Requests the gateway answered itself (budget spent or model stopped).")
    answers: int = Field(default=0, description="Completions with content.")
    empty_answers: int = Field(
        default=0, description="Completions with empty content cut at max_tokens (reasoning used it up)."
    )
    prompt_tokens: int = 0
    completion_tokens: int = 0
    reasoning_tokens: int = 0
    total_tokens: int = 0
    cost_usd: float | None = Field(
        default=None, description="As reported by the provider (OpenRouter usage accounting)."
    )
    request_budget: int | None = None
    token_budget: int | None = None
    errors: dict[str, int] = Field(
        default_factory=dict, description="Provider answers that were errors, by HTTP status."
    )
    last_error: str | None = Field(default=None, description="The provider's last error, in its own words.")


class TestSpec(BaseModel):
    """test.json: everything the detached worker runs. Never holds a secret."""

    __test__ = False  # not a pytest test class

    model_config = ConfigDict(extra="forbid")

    test_id: str
    created_at: float
    environment: EnvironmentRef
    # The environment's config (config_init values + the agent's edits + locked fields); the
    # worker overrides only what a smoke test must (steps, group size, output paths, W&B).
    env_config: dict[str, Any]
    num_steps: int = Field(ge=1)
    group_size: int = Field(ge=1)
    models: list[ModelSpec]
    max_parallel: int = Field(ge=1)
    model_timeout_s: float = Field(gt=0)
    local_server_timeout_s: float = Field(default=300.0, gt=0)
    openrouter_base_url: str
    # "default" (the embedded model, or MCP_RL_MODEL) or a local Hugging Face folder. It also
    # provides the tokenizer every BaseEnv loads, which must be local (no hub access).
    local_model: str = "default"
    use_wandb: bool = False
    # The run's base model (local folder or hub id): its tokenizer is used when it is available
    # locally, else the local model's. None: use the local model's.
    tokenizer: str | None = None
    # An MCP task's paid judge: its estimate over the test (every model's groups), said with the
    # models' own; the judge is held to the task's judge.max_cost_usd over the whole test.
    judge_cost: str | None = None

    def dump(self, path: Path) -> None:
        write_text_atomic(path, self.model_dump_json(indent=2))

    @classmethod
    def load(cls, path: Path) -> TestSpec:
        return cls.model_validate_json(path.read_text(encoding="utf-8"))


class RolloutSample(BaseModel):
    step: int
    score: float
    prompt: str = Field(description="The prompt's last messages, truncated from the front.")
    completion: str = Field(description="The model's answer, truncated.")


class StepResult(BaseModel):
    step: int
    completions: int
    correct: int = Field(description="Completions with score > 0.")
    mean_score: float
    scores: list[float]


class ModelResult(BaseModel):
    """One model's outcome; `state` says whether the numbers are final."""

    model: str
    name: str
    scale: str
    provider: Provider
    slug: str
    state: ModelState = "pending"
    steps_done: int = Field(default=0, description="Groups finished so far (progress while running).")
    started_at: float | None = None
    finished_at: float | None = None
    elapsed_s: float | None = None
    exit_code: int | None = None
    # The model's process (own group), so a reader can end it if the worker died.
    pid: int | None = None
    pid_create_time: float | None = None

    steps: list[StepResult] = []
    steps_tested: int = 0
    total_completions: int = 0
    correct_completions: int = 0
    accuracy: float | None = Field(default=None, description="correct_completions / total_completions.")
    mean_score: float | None = None
    score_std: float | None = None
    min_score: float | None = None
    max_score: float | None = None
    steps_with_correct: int = 0
    step_success_rate: float | None = Field(
        default=None, description="Fraction of steps with at least one correct completion."
    )
    zero_variance_steps: int = Field(default=0, description="Groups whose scores are all equal (no GRPO signal).")
    unreadable_lines: int = 0
    samples: list[RolloutSample] = []
    tool_use: dict[str, float | int] | None = Field(
        default=None,
        description="An MCP task's episodes: episodes, tool calls per episode, tool-call validity (share of calls "
        "well-formed and naming an offered tool), tool errors per episode, share ended by an answer, success "
        "(share with reward 1).",
    )

    usage: ModelUsage | None = Field(
        default=None, description="Requests, tokens and cost of this model (remote and local)."
    )
    notes: list[str] = Field(
        default_factory=list, description="Things worth knowing about the answers (e.g. empty ones)."
    )
    error: str | None = Field(
        default=None, description="Why the model did not succeed: one line with the cause and the fix."
    )
    log_tail: str | None = None
    output_file: str | None = None
    html_file: str | None = None
    log_file: str | None = None
    resources: dict[str, str] = Field(
        default_factory=dict, description="rl:// URIs of the result, the JSONL, the HTML report and the log."
    )


class TestConfig(BaseModel):
    __test__ = False  # not a pytest test class

    num_steps: int
    group_size: int
    rollouts_per_model: int
    total_rollouts: int
    max_parallel: int
    model_timeout_s: float
    tokenizer: str | None = Field(default=None, description="The tokenizer the environment used to count tokens.")
    tokenizer_note: str | None = None
    cost_estimates: dict[str, str] = Field(
        default_factory=dict,
        description="Per model, before its first request: its estimated spend at most (OpenRouter's price for its "
        "token budget; $0 for local models). What the provider reports is in each model's usage.cost_usd.",
    )


class TestSummary(BaseModel):
    __test__ = False  # not a pytest test class

    steps_requested: int
    models_tested: int
    models_finished: int
    models_succeeded: int
    best_model: str | None = Field(
        description="The highest accuracy in this test: on a few training prompts at the sampling temperature, "
        "not a claim that it is the better model (see `measured`)."
    )
    measured: str = Field(
        "",
        description="What these scores measure (training prompts, sampled) and where held-out figures are "
        "(rl_check_status / rl_get_results of a run, rl_evaluate_checkpoint).",
    )
    avg_accuracy: float | None = Field(description="Mean accuracy of the models that produced scored groups.")
    environment_working: bool | None = Field(
        description="True once a model produced scored groups; None while nothing is known yet; False when all finished without."
    )
    output_directory: str


class InferenceTestResult(BaseModel):
    """summary.json and the answer of rl_test_inference / rl://tests/{test_id}."""

    test_id: str
    state: TestState
    environment: str
    environment_file: str
    test_config: TestConfig
    models_tested: list[ModelResult]
    summary: TestSummary
    started_at: float
    updated_at: float = Field(default_factory=time.time)
    finished_at: float | None = None
    elapsed_s: float
    message: str
    resource: str = Field(description="Read this resource for the latest state of the test.")

    def dump(self, path: Path) -> None:
        write_text_atomic(path, self.model_dump_json(indent=2))

    @classmethod
    def load(cls, path: Path) -> InferenceTestResult:
        return cls.model_validate_json(path.read_text(encoding="utf-8"))
