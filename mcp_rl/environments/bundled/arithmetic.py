"""Offline arithmetic: add two small numbers, answer with only the result (exact-match reward).

The problems are generated from a seed (no dataset download); a fixed, seeded share of them is
held out for evaluation and never trained on. The prompt is a short few-shot chat (a system line
and two worked turns) so that a tiny instruct model answers with a bare number from the start and
is right some of the time: rewards vary within a group, which is what group-relative RL learns
from (a format the model never hits gives reward 0 everywhere and nothing to learn).

Works with both Atropos server types: `sglang` (the trainer's inference server; token ids and
sampler logprobs flow back for training) and `openai` (any OpenAI-compatible endpoint, for
smoke tests in `process` mode; the completion text is tokenized locally).
"""

from __future__ import annotations

import asyncio
import random
import re
from collections.abc import Callable
from typing import Any

from atroposlib.envs.base import (
    APIServerConfig,
    BaseEnv,
    BaseEnvConfig,
    ScoredDataGroup,
)
from pydantic import Field, model_validator

from mcp_rl.models import default_model_dir
from mcp_rl.scored_data import MASKED, PROMPT_LOGPROB, groups_already_trained
from mcp_rl.settings import Settings

SYSTEM_PROMPT = "You are a calculator. Reply with only the result."
FEW_SHOT = (("3 + 4", "7"), ("12 + 5", "17"))
_ANSWER = re.compile(r"^\s*(-?\d+)\s*\.?\s*$")


def default_tokenizer() -> str:
    """The embedded model's folder in the mcp-rl state dir (run.yaml always sets it anyway)."""
    return str(default_model_dir(Settings.from_env()))


# Held-out requests in flight at once in evaluate() (the server batches what arrives together).
EVAL_CONCURRENCY = 64


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


def local_server_config(tokenizer: str) -> APIServerConfig:
    """The trainer's inference server (run.yaml sets the real address and model)."""
    return APIServerConfig(
        model_name="default",
        base_url="http://127.0.0.1:8001/v1",
        api_key="x",
        server_type="sglang",
        tokenizer_name=tokenizer,
        health_check=False,
    )


Rollout = tuple[list[int], list[int], list[float] | None, str]


def scored_group(
    rollouts: list[Rollout],
    messages: list[dict[str, str]],
    reward: Callable[[str], float],
    group_size: int,
    rewards_seen: list[float],
) -> ScoredDataGroup | None:
    """The group Atropos trains on, from (prompt tokens, completion tokens, logprobs, text)
    rollouts: None unless every rollout produced tokens. Rewards are also appended to
    `rewards_seen` (the train accuracy logged next)."""
    group = ScoredDataGroup(tokens=[], masks=[], scores=[], messages=[], inference_logprobs=[])
    with_logprobs = True
    for prompt, completion, logprobs, text in rollouts:
        if not completion:
            continue
        score = reward(text)
        rewards_seen.append(score)
        group["tokens"].append(prompt + completion)
        group["masks"].append([MASKED] * len(prompt) + completion)
        group["scores"].append(score)
        group["messages"].append(messages + [{"role": "assistant", "content": text}])
        if logprobs is None:
            with_logprobs = False
        else:
            group["inference_logprobs"].append([PROMPT_LOGPROB] * len(prompt) + logprobs)
    if len(group["tokens"]) != group_size:
        return None
    if not with_logprobs:
        group["inference_logprobs"] = None
    return group


def with_accuracy(
    wandb_metrics: dict[str, Any] | None, rewards_seen: list[float], eval_metrics: list[tuple[str, float]]
) -> dict[str, Any]:
    """`wandb_metrics` plus train/percent_correct since the last call and the pending eval
    metrics; both lists are emptied."""
    metrics = dict(wandb_metrics or {})
    if rewards_seen:
        metrics["train/percent_correct"] = sum(rewards_seen) / len(rewards_seen)
        rewards_seen.clear()
    metrics.update(eval_metrics)
    eval_metrics.clear()
    return metrics


class ArithmeticEnv(BaseEnv):
    """Add two small numbers; reward 1 for exactly the right answer and nothing else."""

    name = "arithmetic"
    env_config_cls = ArithmeticEnvConfig

    def __init__(self, config: ArithmeticEnvConfig, server_configs: Any, slurm: bool = False, testing: bool = False):
        super().__init__(config, server_configs, slurm, testing)
        self.config: ArithmeticEnvConfig = config
        self.train_problems, self.eval_problems = make_problems(config)
        self._rng = random.Random(config.problem_seed + 1)
        self._order: list[int] = []
        self._correct_buffer: list[float] = []
        self.eval_metrics: list[tuple[str, float]] = []

    @classmethod
    def config_init(cls) -> tuple[ArithmeticEnvConfig, list[APIServerConfig]]:
        tokenizer = default_tokenizer()
        env_config = ArithmeticEnvConfig(
            tokenizer_name=tokenizer,
            # 4 answers per problem, 8 problems per 32-sequence batch. The local trainer runs a
            # group's shared prompt once, so answers 3 and 4 of a problem cost almost nothing
            # (6.4-6.9 s a step, against 6.3 s for 8 problems x 2). They give far more groups
            # whose answers differ, which is what GRPO learns from: measured on the default model
            # (bench/bench_trainer.py), 7 of 7 runs reached a 5-step mean reward of 0.8 by step
            # 10-19, against 3 of 6 by step 30 with 2 answers. Fewer problems per step (4 x 4 in
            # 16) was worse: a step's reward then mostly says which problems it drew.
            group_size=4,
            use_wandb=False,
            rollout_server_url="http://127.0.0.1:8000",
            total_steps=30,
            batch_size=32,
            steps_per_eval=1000000,
            max_token_length=256,
            max_num_workers=4,
            wandb_name="arithmetic",
            # Keep every group: the trainer's reward curve then shows the policy's true success
            # rate (dropping all-equal groups would hide the start and the end of learning).
            ensure_scores_are_not_same=False,
        )
        return env_config, [local_server_config(tokenizer)]

    async def setup(self) -> None:
        """Nothing to download: the problems were generated in __init__."""

    # --- items ------------------------------------------------------------------------------
    async def get_next_item(self) -> dict[str, Any]:
        if not getattr(self, "_resume_skipped", False):
            # A resumed run continues its data order: the items its trained steps used are skipped.
            self._resume_skipped = True
            for _ in range(groups_already_trained(self.curr_step, self.config.batch_size, self.config.group_size)):
                await self.get_next_item()
        if not self._order:
            self._order = list(range(len(self.train_problems)))
            self._rng.shuffle(self._order)
        return self.train_problems[self._order.pop()]

    def _prompt_tokens(self, messages: list[dict[str, str]]) -> list[int]:
        text = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def _returns_tokens(self) -> bool:
        """True when the server answers with token ids and logprobs (sglang/vllm/trl types)."""
        server = self.server.servers[0] if getattr(self.server, "servers", None) else None
        server_type = getattr(getattr(server, "config", None), "server_type", "openai")
        return server_type != "openai"

    async def _rollouts(
        self, messages: list[dict[str, str]], n: int, *, temperature: float, split: str
    ) -> list[tuple[list[int], list[int], list[float] | None, str]]:
        """n completions as (prompt tokens, completion tokens, completion logprobs, text)."""
        if self._returns_tokens():
            prompt = self._prompt_tokens(messages)
            prompt_tokens, outputs, logprobs, _ = await self.server.tokens_and_logprobs_completion(
                input_ids=prompt,
                n=n,
                max_tokens=self.config.max_new_tokens,
                temperature=temperature,
                split=split,
            )
            return [
                (
                    list(prompt_tokens),
                    list(out),
                    [float(x) for x in lps],
                    self.tokenizer.decode(out, skip_special_tokens=True),
                )
                for out, lps in zip(outputs, logprobs, strict=True)
            ]
        completion = await self.server.chat_completion(
            messages=messages,
            n=n,
            max_tokens=self.config.max_new_tokens,
            temperature=temperature,
            split=split,
        )
        prompt = self._prompt_tokens(messages)
        results: list[tuple[list[int], list[int], list[float] | None, str]] = []
        for choice in completion.choices:
            text = choice.message.content or ""
            tokens = list(self.tokenizer.encode(text, add_special_tokens=False))
            if self.tokenizer.eos_token_id is not None and choice.finish_reason == "stop":
                tokens.append(self.tokenizer.eos_token_id)
            results.append((prompt, tokens, None, text))
        return results

    async def collect_trajectories(self, item: dict[str, Any]) -> tuple[ScoredDataGroup | None, list[Any]]:
        messages = build_messages(item, self.config.few_shot)
        rollouts = await self._rollouts(
            messages, self.config.group_size, temperature=self.config.temperature, split="train"
        )
        group = scored_group(
            rollouts,
            messages,
            lambda text: score_answer(text, item["answer"]),
            self.config.group_size,
            self._correct_buffer,
        )
        return group, []

    # --- evaluation and logging -------------------------------------------------------------
    async def evaluate(self, *args: Any, **kwargs: Any) -> None:
        """Greedy answers on the held-out problems -> eval/percent_correct. The requests go out
        together (at most EVAL_CONCURRENCY at a time), so a batching server answers them in a few
        batches: one at a time, 201 problems took 114 s on 2 cores instead of seconds."""
        gate = asyncio.Semaphore(EVAL_CONCURRENCY)

        async def one(problem: dict[str, Any]) -> float:
            async with gate:
                rollouts = await self._rollouts(
                    build_messages(problem, self.config.few_shot), 1, temperature=0.0, split="eval"
                )
            return score_answer(rollouts[0][3], problem["answer"]) if rollouts else 0.0

        scores = await asyncio.gather(*(one(problem) for problem in self.eval_problems))
        self.eval_metrics.append(("eval/percent_correct", sum(scores) / len(self.eval_problems)))

    async def wandb_log(self, wandb_metrics: dict[str, Any] | None = None) -> None:
        await super().wandb_log(with_accuracy(wandb_metrics, self._correct_buffer, self.eval_metrics))


if __name__ == "__main__":
    ArithmeticEnv.cli()
