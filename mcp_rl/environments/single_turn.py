"""The base of mcp-rl's single-turn environments: one prompt per item, `group_size` answers, each
scored. Arithmetic, GSM8K, reasoning-gym and the task interface (`task_env`) derive from it.

A subclass says only what it knows:

    messages(item)          the chat the model answers
    score(text, item)       the reward of one answer (a float)
    next_train_item()       the next training item (default: shuffled passes over
                            `self.train_problems` in `self.order`, seeded by order_seed())
    eval_problems           the held-out items, never trained on (`held_out_items()` returns them)
    default_settings()      its config_init() values beside the shared local defaults
    reward_group(item)      (optional) the group a training reward is also reported under
    reference(item)         (optional) the item's reference answer as a model would give it, tried
                            as a constant answer to every held-out item (default None: none)
    report_evaluation(...)  (optional) how an evaluation is reported (default: eval/percent_correct
                            in `self.eval_metrics`, which wandb_log hands to Atropos); it is given,
                            per item, what a few constant answers score on it
                            (mcp_rl.environments.constant_answers), for its samples

and the base does the rest, the same for all of them: sampling on both Atropos server types (token
ids and logprobs from sglang-type servers, text tokenized locally from openai-type ones), the
scored group (prompt masked, one sequence per answer, dropped unless every answer has tokens),
the resume skip (a resumed run continues its data order), the greedy evaluation of the held-out
items (at most EVAL_CONCURRENCY requests at once, so a batching server answers them together) and
the train/eval accuracy metrics.

The attribute names are read from outside: `eval_problems` is the eval split mcp-rl's evaluation
capture and validator find (a name holding "eval"), and `eval_metrics` the (name, value) pairs
Atropos environments conventionally leave for wandb_log (mcp_rl.environments.eval_capture).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from atroposlib.envs.base import APIServerConfig, BaseEnv, ScoredDataGroup

from mcp_rl.environments.constant_answers import constant_scores
from mcp_rl.environments.training_order import TrainingOrder
from mcp_rl.models import default_model_dir
from mcp_rl.scored_data import MASKED, PROMPT_LOGPROB
from mcp_rl.settings import Settings

Item = Any
# (prompt tokens, completion tokens, completion logprobs or None, completion text)
Rollout = tuple[list[int], list[int], list[float] | None, str]
# Held-out requests in flight at once in evaluate() (the server batches what arrives together):
# one at a time, arithmetic's 201 problems took 114 s on 2 cores instead of seconds.
EVAL_CONCURRENCY = 64
# Where the supervisor's Atropos API listens (run.yaml sets the real address anyway).
LOCAL_API_URL = "http://127.0.0.1:8000"


def default_tokenizer() -> str:
    """The embedded model's folder in the mcp-rl state dir (run.yaml always sets it anyway)."""
    return str(default_model_dir(Settings.from_env()))


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


def returns_tokens(server: Any) -> bool:
    """True when an Atropos ServerManager's server answers with token ids and logprobs
    (sglang/vllm/trl types); False for an openai-type one (text only)."""
    first = server.servers[0] if getattr(server, "servers", None) else None
    return getattr(getattr(first, "config", None), "server_type", "openai") != "openai"


def scored_group(
    rollouts: list[Rollout],
    messages: list[dict[str, str]],
    reward: Callable[[str], float],
    group_size: int,
    rewards_seen: list[float],
) -> ScoredDataGroup | None:
    """The group Atropos trains on: None unless every rollout produced tokens. Rewards are also
    appended to `rewards_seen` (the train accuracy logged next)."""
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


class SingleTurnEnv(BaseEnv):
    """One prompt, `group_size` scored answers (see the module doc for what a subclass defines).
    Its config has `max_new_tokens` (tokens per answer) and `temperature` (of training rollouts)."""

    def __init__(self, config: Any, server_configs: Any, slurm: bool = False, testing: bool = False) -> None:
        super().__init__(config, server_configs, slurm, testing)
        self.train_problems: list[Item] = []
        self.eval_problems: list[Item] = []
        self.order = TrainingOrder(self.order_seed())
        # Training rewards since the last wandb_log, by reward_group (None: no group).
        self._rewards: dict[str | None, list[float]] = {}
        self.eval_metrics: list[tuple[str, float]] = []

    # --- what a subclass says -----------------------------------------------------------------
    def messages(self, item: Item) -> list[dict[str, str]]:
        raise NotImplementedError(f"{type(self).__name__} defines no messages(item)")

    def score(self, text: str, item: Item) -> float:
        raise NotImplementedError(f"{type(self).__name__} defines no score(text, item)")

    def order_seed(self) -> int:
        """The seed of the training order (the config's `seed`)."""
        return int(self.config.seed)

    @classmethod
    def default_settings(cls) -> dict[str, Any]:
        """The config_init() values this environment's defaults differ in (group size, steps...)."""
        return {}

    def reward_group(self, item: Item) -> str | None:
        """The group a training reward of `item` is also reported under (None: none)."""
        return None

    def held_out_items(self) -> list[Item]:
        """The items evaluate() answers greedily."""
        return self.eval_problems

    def reference(self, item: Item) -> str | None:
        """The item's reference answer as a model would give it (None: none to offer)."""
        return None

    # --- config -----------------------------------------------------------------------------
    @classmethod
    def config_init(cls) -> tuple[Any, list[APIServerConfig]]:
        tokenizer = default_tokenizer()
        shared: dict[str, Any] = {
            "tokenizer_name": tokenizer,
            "use_wandb": False,
            "rollout_server_url": LOCAL_API_URL,
            "batch_size": 32,
            "max_num_workers": 4,
            "wandb_name": cls.name,
        }
        env_config = cls.env_config_cls(**{**shared, **cls.default_settings()})
        return env_config, [local_server_config(tokenizer)]

    # --- items ------------------------------------------------------------------------------
    def next_train_item(self) -> Item:
        """A shuffled pass over the training items, then another."""
        return self.train_problems[self.order.next_index(len(self.train_problems))]

    async def get_next_item(self) -> Item:
        # A resumed run continues its data order: the items its trained steps used are skipped.
        self.order.skip_trained(self.curr_step, self.config.batch_size, self.config.group_size, self.next_train_item)
        return await self.draw(self.next_train_item)

    async def draw(self, next_item: Callable[[], Item]) -> Item:
        """Calls `next_item` (a subclass whose items are slow to make runs it off the event loop)."""
        return next_item()

    # --- sampling ---------------------------------------------------------------------------
    def prompt_tokens(self, messages: list[dict[str, str]]) -> list[int]:
        text = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    async def rollouts(
        self, messages: list[dict[str, str]], n: int, *, temperature: float, split: str
    ) -> list[Rollout]:
        """n completions as (prompt tokens, completion tokens, completion logprobs, text)."""
        if returns_tokens(self.server):
            prompt = self.prompt_tokens(messages)
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
        prompt = self.prompt_tokens(messages)
        results: list[Rollout] = []
        for choice in completion.choices:
            text = choice.message.content or ""
            tokens = list(self.tokenizer.encode(text, add_special_tokens=False))
            if self.tokenizer.eos_token_id is not None and choice.finish_reason == "stop":
                tokens.append(self.tokenizer.eos_token_id)
            results.append((prompt, tokens, None, text))
        return results

    async def collect_trajectories(self, item: Item) -> tuple[ScoredDataGroup | None, list[Any]]:
        messages = self.messages(item)
        rollouts = await self.rollouts(
            messages, self.config.group_size, temperature=self.config.temperature, split="train"
        )
        seen = self._rewards.setdefault(self.reward_group(item), [])
        group = scored_group(rollouts, messages, lambda text: self.score(text, item), self.config.group_size, seen)
        return group, []

    # --- evaluation and metrics ---------------------------------------------------------------
    async def evaluate(self, *args: Any, **kwargs: Any) -> None:
        """Greedy answers on the held-out items, reported by report_evaluation."""
        items = self.held_out_items()
        if not items:
            return
        gate = asyncio.Semaphore(EVAL_CONCURRENCY)

        async def one(item: Item) -> tuple[str, float]:
            async with gate:
                rollouts = await self.rollouts(self.messages(item), 1, temperature=0.0, split="eval")
            if not rollouts:
                return "", 0.0
            text = rollouts[0][3]
            return text, self.score(text, item)

        answers = await asyncio.gather(*(one(item) for item in items))
        texts = [text for text, _ in answers]
        # Off the event loop: a few answers graded on every item, by a scorer that may be slow.
        constants = await asyncio.to_thread(
            constant_scores, items, texts, [self.reference(item) for item in items], self.score
        )
        await self.report_evaluation(items, texts, [score for _, score in answers], constants)

    async def report_evaluation(
        self, items: list[Item], texts: list[str], scores: list[float], constants: list[dict[str, float]]
    ) -> None:
        """eval/percent_correct, handed to Atropos at the next wandb_log (`constants`: per item,
        what a few constant answers score on it, for a subclass's per-item samples)."""
        self.eval_metrics.append(("eval/percent_correct", sum(scores) / len(items)))

    def train_metrics(self) -> dict[str, float]:
        """train/percent_correct since the last call (and per reward group); the rewards are cleared."""
        metrics: dict[str, float] = {}
        seen = [r for rewards in self._rewards.values() for r in rewards]
        if seen:
            metrics["train/percent_correct"] = sum(seen) / len(seen)
        for name, rewards in self._rewards.items():
            if name is not None and rewards:
                metrics[f"train/{name}/percent_correct"] = sum(rewards) / len(rewards)
            rewards.clear()
        return metrics

    async def wandb_log(self, wandb_metrics: dict[str, Any] | None = None) -> None:
        metrics = dict(wandb_metrics or {})
        metrics.update(self.train_metrics())
        metrics.update(self.eval_metrics)
        self.eval_metrics.clear()
        await super().wandb_log(metrics)
