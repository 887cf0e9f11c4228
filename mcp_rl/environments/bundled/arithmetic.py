"""Offline arithmetic: add two small numbers, answer with only the result (exact-match reward).

The problems are generated from a seed (no dataset download); a fixed, seeded share of them is
held out for evaluation and never trained on. The prompt is a short few-shot chat (a system line
and two worked turns) so that a tiny instruct model answers with a bare number from the start and
is right some of the time: rewards vary within a group, which is what group-relative RL learns
from (a format the model never hits gives reward 0 everywhere and nothing to learn).

Works with both Atropos server types: `sglang` (the trainer's inference server; token ids and
sampler logprobs flow back for training) and `openai` (any OpenAI-compatible endpoint, for
smoke tests in `process` mode; the completion text is tokenized locally), as every single-turn
environment does (mcp_rl.environments.single_turn).
"""

from __future__ import annotations

import random
import re
from typing import Any

from atroposlib.envs.base import BaseEnvConfig
from pydantic import Field, model_validator

from mcp_rl.environments.single_turn import SingleTurnEnv

SYSTEM_PROMPT = "You are a calculator. Reply with only the result."
FEW_SHOT = (("3 + 4", "7"), ("12 + 5", "17"))
_ANSWER = re.compile(r"^\s*(-?\d+)\s*\.?\s*$")


class ArithmeticEnvConfig(BaseEnvConfig):
    min_operand: int = Field(default=1, ge=0, description="Smallest operand")
    # 1..20: 400 problems, enough for 200 held-out ones (issue 24: 16 could not show a gain).
    max_operand: int = Field(default=20, ge=1, description="Largest operand")
    operations: str = Field(default="+", pattern=r"^[-+*]+$", description="Operators to draw from, any of '+-*'")
    eval_fraction: float = Field(
        default=0.5,
        gt=0,
        lt=1,
        description="Share of problems held out for evaluation (a problem and its commuted twin stay together)",
    )
    problem_seed: int = Field(default=0, description="Seed of the problem split and training order")
    max_new_tokens: int = Field(default=8, ge=1, le=64, description="Tokens per answer")
    temperature: float = Field(default=1.0, ge=0, description="Sampling temperature of training rollouts")
    few_shot: bool = Field(default=True, description="Show two worked examples before the question")

    @model_validator(mode="after")
    def _operand_range(self) -> ArithmeticEnvConfig:
        # Checked here so rl_edit_config refuses it at once, not the run 13 s after it starts.
        if self.min_operand > self.max_operand:
            raise ValueError(f"min_operand ({self.min_operand}) must not exceed max_operand ({self.max_operand})")
        return self


def answer_of(a: int, op: str, b: int) -> int:
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    if op == "*":
        return a * b
    raise ValueError(f"unknown operator {op!r}")


def _twin_key(a: int, op: str, b: int) -> tuple[str, int, int]:
    """Problems with the same key are the same question up to commutation (a + b, b + a)."""
    return (op, min(a, b), max(a, b)) if op in "+*" else (op, a, b)


def make_problems(config: ArithmeticEnvConfig) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Every (a, op, b) in range, split into train and held-out eval by a seeded shuffle.

    The split is by question up to commutation: a + b and b + a land on the same side, so no
    held-out problem has its twin in training. The few-shot examples' questions are always
    training problems (a held-out problem the prompt answers is not held out)."""
    ops = [o for o in config.operations if o in "+-*"] or ["+"]
    lo, hi = config.min_operand, max(config.min_operand, config.max_operand)
    problems: list[dict[str, Any]] = [
        {"a": a, "op": op, "b": b, "answer": answer_of(a, op, b)}
        for op in ops
        for a in range(lo, hi + 1)
        for b in range(lo, hi + 1)
    ]
    shown = {_twin_key(int(x), o, int(y)) for q, _ in FEW_SHOT for x, o, y in [q.split()]}
    keys = sorted({_twin_key(p["a"], p["op"], p["b"]) for p in problems} - shown)
    rng = random.Random(config.problem_seed)
    rng.shuffle(keys)
    by_key: dict[tuple[str, int, int], list[dict[str, Any]]] = {}
    for p in problems:
        by_key.setdefault(_twin_key(p["a"], p["op"], p["b"]), []).append(p)
    wanted = max(1, round(len(problems) * config.eval_fraction))
    held: set[tuple[str, int, int]] = set()
    count = 0
    for key in keys:
        if count >= wanted:
            break
        held.add(key)
        count += len(by_key[key])
    train = [p for p in problems if _twin_key(p["a"], p["op"], p["b"]) not in held]
    evals = [p for p in problems if _twin_key(p["a"], p["op"], p["b"]) in held]
    if not train or not evals:
        raise ValueError("the operand range is too small for a train/eval split")
    rng.shuffle(train)
    rng.shuffle(evals)
    return train, evals


def question(problem: dict[str, Any]) -> str:
    return f"{problem['a']} {problem['op']} {problem['b']}"


def build_messages(problem: dict[str, Any], few_shot: bool = True) -> list[dict[str, str]]:
    messages = [{"role": "system", "content": SYSTEM_PROMPT}]
    if few_shot:
        for q, a in FEW_SHOT:
            messages += [{"role": "user", "content": q}, {"role": "assistant", "content": a}]
    messages.append({"role": "user", "content": question(problem)})
    return messages


def score_answer(text: str, answer: int) -> float:
    """1.0 for exactly the right integer (surrounding spaces or a final period allowed), else 0."""
    match = _ANSWER.match(text or "")
    return 1.0 if match is not None and int(match.group(1)) == answer else 0.0


class ArithmeticEnv(SingleTurnEnv):
    """Add two small numbers; reward 1 for exactly the right answer and nothing else."""

    name = "arithmetic"
    env_config_cls = ArithmeticEnvConfig

    def __init__(self, config: ArithmeticEnvConfig, server_configs: Any, slurm: bool = False, testing: bool = False):
        super().__init__(config, server_configs, slurm, testing)
        self.config: ArithmeticEnvConfig = config
        self.train_problems, self.eval_problems = make_problems(config)

    def order_seed(self) -> int:
        return self.config.problem_seed + 1

    @classmethod
    def default_settings(cls) -> dict[str, Any]:
        return {
            # 4 answers per problem, 8 problems per 32-sequence batch. The local trainer runs a
            # group's shared prompt once, so answers 3 and 4 of a problem cost almost nothing
            # (6.4-6.9 s a step, against 6.3 s for 8 problems x 2). They give far more groups
            # whose answers differ, which is what GRPO learns from: measured on the default model
            # (bench/bench_trainer.py), 7 of 7 runs reached a 5-step mean reward of 0.8 by step
            # 10-19, against 3 of 6 by step 30 with 2 answers. Fewer problems per step (4 x 4 in
            # 16) was worse: a step's reward then mostly says which problems it drew.
            "group_size": 4,
            "total_steps": 30,
            "steps_per_eval": 1000000,
            "max_token_length": 256,
            # Keep every group: the trainer's reward curve then shows the policy's true success
            # rate (dropping all-equal groups would hide the start and the end of learning).
            "ensure_scores_are_not_same": False,
        }

    async def setup(self) -> None:
        """Nothing to download: the problems were generated in __init__."""

    def messages(self, item: dict[str, Any]) -> list[dict[str, str]]:
        return build_messages(item, self.config.few_shot)

    def score(self, text: str, item: dict[str, Any]) -> float:
        return score_answer(text, item["answer"])


if __name__ == "__main__":
    ArithmeticEnv.cli()
