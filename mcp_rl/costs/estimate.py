"""The estimate before paid work: tokens and USD per step and for the whole run, as a range.

What drives a step on a paid backend (see shared reference, Costs): sampling
(groups x one prompt prefilled + group_size completions sampled), training (every sequence,
prompt and completion, through forward_backward) and evaluation episodes (sampling only).
Prompt and completion lengths are not known before the run: the range runs from short
prompts and short answers to long prompts and answers that reach max tokens, and the
"expected" figure sits between (mid prompt, half of max tokens).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from mcp_rl.costs.meter import TokenCounts, usd
from mcp_rl.costs.rates import RatesLookup, TinkerRates

# Prompt tokens assumed when nothing better is known (a task statement and a chat template).
PROMPT_TOKENS = (32, 512)
# The shortest answers assumed, as a share of max tokens.
SHORT_ANSWER = 0.1
EXPECTED_ANSWER = 0.5
UNKNOWN = "unknown"


@dataclass(frozen=True)
class RunShape:
    backend: str
    model: str
    steps: int
    batch_size: int
    group_size: int
    max_tokens: int  # longest completion
    max_sequence: int  # longest sequence the trainer takes
    eval_every: int = 0
    prompt_tokens: tuple[int, int] = PROMPT_TOKENS
    self_hosted: str | None = None  # a Tinker-compatible server of the user's (TrainerSettings.self_hosted_server)

    def drivers(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "model": self.model,
            "steps": self.steps,
            "batch_size": self.batch_size,
            "group_size": self.group_size,
            "groups_per_step": math.ceil(self.batch_size / max(1, self.group_size)),
            "max_tokens": self.max_tokens,
            "prompt_tokens_assumed": list(self.prompt_tokens),
            "evaluations": self.evaluations(),
            **({"self_hosted_server": self.self_hosted} if self.self_hosted else {}),
        }

    def evaluations(self) -> int:
        """Before the first step, after the last, and every eval_every steps."""
        return 2 + (self.steps // self.eval_every if self.eval_every > 0 else 0)


def step_tokens(shape: RunShape, prompt: int, completion: int) -> TokenCounts:
    groups = math.ceil(shape.batch_size / max(1, shape.group_size))
    completion = max(0, min(completion, shape.max_sequence - prompt))
    return TokenCounts(
        prefill=groups * prompt,
        sampled=shape.batch_size * completion,
        trained=shape.batch_size * (prompt + completion),
    )


def eval_tokens(shape: RunShape, prompt: int, completion: int) -> TokenCounts:
    """One evaluation: a batch's worth of episodes sampled, nothing trained."""
    counts = step_tokens(shape, prompt, completion)
    return TokenCounts(prefill=shape.batch_size * prompt, sampled=counts.sampled, trained=0)


@dataclass
class Estimate:
    """What paid work is estimated to cost. USD values are None when unknown (never 0 for that)."""

    free: bool
    drivers: dict[str, Any]
    step_tokens: dict[str, dict[str, int]] = field(default_factory=dict)  # low / expected / high
    step_usd: dict[str, float | None] = field(default_factory=dict)
    run_usd: dict[str, float | None] = field(default_factory=dict)
    rates: str | None = None
    problem: str | None = None
    # An MCP task's paid judge (OpenRouter), beside the backend's cost: capped by its own
    # judge.max_cost_usd (config/training_cost.py judge_estimate).
    judge: dict[str, Any] | None = None

    @property
    def known(self) -> bool:
        return self.free or self.run_usd.get("high") is not None

    def high(self) -> float | None:
        return 0.0 if self.free else self.run_usd.get("high")

    def expected(self) -> float | None:
        return 0.0 if self.free else self.run_usd.get("expected")

    def as_dict(self) -> dict[str, Any]:
        return {
            "label": "estimated",
            "free": self.free,
            "summary": self.summary(),
            "per_step_tokens": self.step_tokens,
            "per_step_usd": self.step_usd if not self.free else {"low": 0.0, "expected": 0.0, "high": 0.0},
            "run_usd": self.run_usd if not self.free else {"low": 0.0, "expected": 0.0, "high": 0.0},
            "drivers": self.drivers,
            "rates": self.rates,
            "problem": self.problem,
            **({"judge": self.judge} if self.judge is not None else {}),
        }

    def summary(self) -> str:
        text = self._backend_summary()
        return text if self.judge is None else f"{text} Plus {self.judge['summary']}"

    def _backend_summary(self) -> str:
        if self.free and self.drivers.get("self_hosted_server"):
            return (
                f"$0 from Tinker: the run trains on the self-hosted Tinker-compatible server at "
                f"{self.drivers['self_hosted_server']} (its hardware is its owner's to count)."
            )
        if self.free:
            return f"$0: the {self.drivers.get('backend')} backend runs on this machine (no paid service)."
        d = self.drivers
        what = (
            f"{d['steps']} steps x {d['batch_size']} sequences (groups of {d['group_size']}, up to {d['max_tokens']} "
            f"tokens each, prompts of {d['prompt_tokens_assumed'][0]}-{d['prompt_tokens_assumed'][1]} tokens assumed) "
            f"on {d['model']}, {d['evaluations']} evaluations"
        )
        if not self.known:
            return f"Estimated cost: unknown ({self.problem}). Drivers: {what}."
        step, run = self.step_usd, self.run_usd
        return (
            f"Estimated cost: ${fmt(run['low'])}-${fmt(run['high'])} for the run (expected ${fmt(run['expected'])}); "
            f"${fmt(step['low'])}-${fmt(step['high'])} per step. Drivers: {what}."
        )


def fmt(value: float | None) -> str:
    if value is None:
        return UNKNOWN
    if value >= 100:
        return f"{value:,.0f}"
    if value >= 1:
        return f"{value:.2f}"
    return f"{value:.4f}"


def estimate_run(shape: RunShape, lookup: RatesLookup | None) -> Estimate:
    """`lookup` None means a free backend (local, or a self-hosted Tinker-compatible server)."""
    drivers = shape.drivers()
    if shape.backend != "tinker" or lookup is None:
        return Estimate(free=True, drivers=drivers)
    low_p, high_p = shape.prompt_tokens
    points = {
        "low": (low_p, max(1, round(shape.max_tokens * SHORT_ANSWER))),
        "expected": ((low_p + high_p) // 2, max(1, round(shape.max_tokens * EXPECTED_ANSWER))),
        "high": (high_p, shape.max_tokens),
    }
    rates: TinkerRates | None = lookup.rates
    estimate = Estimate(free=False, drivers=drivers, rates=rates.describe() if rates else None, problem=lookup.problem)
    for name, (prompt, completion) in points.items():
        per_step = step_tokens(shape, prompt, completion)
        evals = eval_tokens(shape, prompt, completion).scaled(shape.evaluations())
        estimate.step_tokens[name] = {
            "prefill": per_step.prefill,
            "sampled": per_step.sampled,
            "trained": per_step.trained,
        }
        step_cost = usd(per_step, rates)
        eval_cost = usd(evals, rates)
        estimate.step_usd[name] = step_cost
        estimate.run_usd[name] = None if step_cost is None or eval_cost is None else step_cost * shape.steps + eval_cost
    return estimate
