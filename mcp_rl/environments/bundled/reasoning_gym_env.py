"""reasoning-gym (PyPI `reasoning-gym`): any of its procedural datasets, or a weighted mixture of
them, as an environment: `rg:<dataset>` or `rg:<a>=<weight>,<b>=<weight>` selects it.

Items are the datasets' own (question, answer, metadata), scored by the dataset's own
`score_answer` on the text inside <answer>...</answer> (or the whole reply without tags).

    training    dataset d's items of seeds `seed`, `seed + 1`, ... `seed + train_size - 1`
                (reasoning-gym makes item i of a dataset with seed s from Random(s + i)); a
                mixture draws each item's dataset by weight
    held out    `held_out_size` items from seeds `held_out_seed` + i (default 1e9: a range training
                never reaches, checked), split over a mixture's datasets by weight (at least one
                each), and any whose question a training item also asks dropped from training

evaluate() answers the held-out items greedily and reports one sample per item (its dataset
included, and what a few constant answers score on it by the dataset's scorer: the verdict's
constant baseline, mcp_rl.environments.constant_answers) through Atropos's evaluate_log: mcp-rl's
trainer runs it before step 1 and after the last step, and pairs the items by id
(mcp_rl.proof.env_eval); training and held-out figures are also given per dataset.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

from atroposlib.envs.base import BaseEnvConfig
from pydantic import Field, field_validator, model_validator

from mcp_rl.environments.constant_answers import SAMPLE_KEY
from mcp_rl.environments.rg_spec import PREFIX, held_out_counts, parse_spec
from mcp_rl.environments.single_turn import SingleTurnEnv

# The default system prompt: reasoning-gym's own "direct" prompt (answer inside the tags).
SYSTEM_PROMPT = (
    "Answer the question directly. Provide your answer between <answer> and </answer> tags. "
    "Do not return any preamble, explanation, or reasoning."
)


def extract(completion: str) -> str:
    """The answer inside the last <answer>...</answer>, else the whole reply, stripped."""
    # reasoning_gym takes seconds to import: selecting this environment (its config) must not pay it
    from reasoning_gym.utils import extract_answer

    found = extract_answer(completion)
    return (found if found is not None else completion).strip()


class ReasoningGymConfig(BaseEnvConfig):
    datasets: str = Field(
        default="leg_counting",
        description="A reasoning-gym dataset, or a weighted mixture 'a=0.7,b=0.3' "
        "(rl_list_environments(filter='rg:') lists them with their parameters).",
    )
    params: str = Field(
        default="{}",
        description="Each dataset's own parameters as JSON text, {dataset: {parameter: value}} (e.g. "
        '\'{"countdown": {"min_numbers": 3}}\'); unset ones keep reasoning-gym\'s defaults.',
    )
    seed: int = Field(default=0, ge=0, description="First seed of the training items.")
    train_size: int = Field(default=100_000, ge=1, le=100_000_000, description="Training seeds per dataset.")
    held_out_size: int = Field(default=200, ge=1, le=10_000, description="Held-out items in all.")
    held_out_seed: int = Field(
        default=1_000_000_000, ge=0, description="First seed of the held-out items (past every training seed)."
    )
    max_new_tokens: int = Field(default=32, ge=1, le=4096, description="Tokens per answer.")
    temperature: float = Field(default=1.0, ge=0.0, le=2.0, description="Sampling temperature of training.")
    system_prompt: str = Field(default=SYSTEM_PROMPT, description="The system message of every item.")

    @field_validator("datasets")
    @classmethod
    def _spec(cls, value: str) -> str:
        parse_spec(value)
        return value.strip().removeprefix(PREFIX)

    @field_validator("params")
    @classmethod
    def _params(cls, value: str) -> str:
        try:
            parsed = json.loads(value or "{}")
        except ValueError as exc:
            raise ValueError(f"params is not JSON: {exc}") from None
        if not isinstance(parsed, dict) or not all(isinstance(v, dict) for v in parsed.values()):
            raise ValueError('params must be a JSON object of objects: {"<dataset>": {"<parameter>": <value>}}')
        return json.dumps(parsed, sort_keys=True)

    @property
    def dataset_params(self) -> dict[str, dict[str, Any]]:
        return dict(json.loads(self.params))

    @model_validator(mode="after")
    def _disjoint(self) -> ReasoningGymConfig:
        if self.seed + self.train_size > self.held_out_seed and self.held_out_seed + self.held_out_size > self.seed:
            raise ValueError(
                f"training seeds {self.seed}..{self.seed + self.train_size - 1} overlap the held-out seeds from "
                f"{self.held_out_seed}: move held_out_seed past them"
            )
        unknown = set(self.dataset_params) - set(parse_spec(self.datasets))
        if unknown:
            raise ValueError(f"params names datasets not in the mixture: {', '.join(sorted(unknown))}")
        return self


def make_datasets(config: ReasoningGymConfig) -> tuple[dict[str, Any], dict[str, Any]]:
    """({dataset: training dataset}, {dataset: held-out dataset}) through reasoning_gym.create_dataset."""
    # reasoning_gym takes seconds to import: only a process that makes items pays it
    import reasoning_gym

    weights = parse_spec(config.datasets)
    counts = held_out_counts(weights, config.held_out_size)
    train, held = {}, {}
    for name in weights:
        params = dict(config.dataset_params.get(name) or {})
        train[name] = reasoning_gym.create_dataset(name, **params, seed=config.seed, size=config.train_size)
        held[name] = reasoning_gym.create_dataset(name, **params, seed=config.held_out_seed, size=counts[name])
    return train, held


class ReasoningGymEnv(SingleTurnEnv):
    """reasoning-gym datasets and mixtures; rewards are the datasets' own scores (0..1)."""

    name = "reasoning_gym"
    env_config_cls = ReasoningGymConfig

    def __init__(self, config: ReasoningGymConfig, server_configs: Any, slurm: bool = False, testing: bool = False):
        super().__init__(config, server_configs, slurm, testing)
        self.config: ReasoningGymConfig = config
        self.weights = parse_spec(config.datasets)
        self.train_sets, self.held_sets = make_datasets(config)
        self.held_out: list[dict[str, Any]] = [
            {"dataset": name, "index": i, **ds[i]} for name, ds in self.held_sets.items() for i in range(len(ds))
        ]
        self._held_questions = {item["question"] for item in self.held_out}
        self._next = dict.fromkeys(self.weights, 0)
        # Training rewards per dataset, in the mixture's order.
        self._rewards = {name: [] for name in self.weights}
        self._skipped = 0

    def order_seed(self) -> int:
        return self.config.seed + 1

    @classmethod
    def default_settings(cls) -> dict[str, Any]:
        return {
            "group_size": 4,
            "total_steps": 30,
            "steps_per_eval": 1000000,
            "max_token_length": 1024,
            "ensure_scores_are_not_same": False,
        }

    async def setup(self) -> None:
        """Nothing to download: items are generated as they are drawn."""

    def messages(self, item: dict[str, Any]) -> list[dict[str, str]]:
        return [
            {"role": "system", "content": self.config.system_prompt},
            {"role": "user", "content": str(item["question"])},
        ]

    def score(self, text: str, item: dict[str, Any]) -> float:
        dataset = (self.train_sets if item.get("split") == "train" else self.held_sets)[item["dataset"]]
        entry = {k: v for k, v in item.items() if k not in ("dataset", "index", "split")}
        try:
            value = float(dataset.score_answer(extract(text), entry))
        except Exception:  # a dataset's scorer choking on a malformed answer scores it 0
            return 0.0
        return min(1.0, max(0.0, value))

    def reward_group(self, item: dict[str, Any]) -> str:
        return str(item["dataset"])

    def held_out_items(self) -> list[dict[str, Any]]:
        return self.held_out

    def next_train_item(self) -> dict[str, Any]:
        names = list(self.weights)
        while True:
            name = self.order.rng.choices(names, weights=[self.weights[n] for n in names])[0]
            index = self._next[name] % self.config.train_size
            self._next[name] += 1
            item = {"dataset": name, "index": index, "split": "train", **self.train_sets[name][index]}
            if item["question"] not in self._held_questions:
                return item
            self._skipped += 1  # a held-out question is never trained on

    async def draw(self, next_item: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        # Some datasets take a second or more per item (listed as slow): not on the event loop.
        return await asyncio.to_thread(next_item)

    def reference(self, item: dict[str, Any]) -> str | None:
        return str(item["answer"])

    async def report_evaluation(
        self,
        items: list[dict[str, Any]],
        texts: list[str],
        scores: list[float],
        constants: list[dict[str, float]],
    ) -> None:
        """One sample per held-out item (with its dataset, and what a few constant answers score on
        it by the dataset's own scorer) through Atropos's evaluate_log, and the figures overall and
        per dataset."""
        samples = [
            {
                "id": f"{item['dataset']}/{self.config.held_out_seed}+{item['index']}",
                "dataset": item["dataset"],
                "question": item["question"],
                "answer": str(item["answer"]),
                "response": text,
                "score": score,
                SAMPLE_KEY: constant,
            }
            for item, text, score, constant in zip(items, texts, scores, constants, strict=True)
        ]
        metrics = {"eval/percent_correct": sum(scores) / len(samples)}
        for name in self.weights:
            mine = [s["score"] for s in samples if s["dataset"] == name]
            metrics[f"eval/{name}/percent_correct"] = sum(mine) / len(mine)
        await self.evaluate_log(metrics=metrics, samples=samples, verbose=False)


if __name__ == "__main__":
    ReasoningGymEnv.cli()
