"""GSM8K: grade-school math word problems; reward 1 for the right final number.

The walkthrough of the original Hermes RL tools starts with a GSM8K environment; this one makes
it work without any checkout. The problems come from the Hugging Face dataset `openai/gsm8k`
(config `main`: 7473 train, 1319 test) through `datasets`, downloaded on first use and cached by
the hub client. Without network (or with HF_HUB_OFFLINE set) and no cached copy, setup fails
with an error naming the dataset; `data_path` points at a local JSONL file of
{"question", "answer"} lines instead (the dataset's own format: the answer ends with
`#### <number>`).

The model is asked to end with `#### <number>`; the reward is 1 when the number after the last
`####` (else the last number in the reply) equals the reference. Rollouts work with both Atropos
server types, as in every single-turn environment (mcp_rl.environments.single_turn).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from atroposlib.envs.base import BaseEnvConfig
from pydantic import Field

from mcp_rl.environments.single_turn import SingleTurnEnv

SYSTEM_PROMPT = (
    "Solve the math word problem. Reason step by step, then give the final answer on its own line as '#### <number>'."
)
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")
_OFFLINE_VALUES = ("1", "true", "yes", "on")


class GSM8KEnvConfig(BaseEnvConfig):
    dataset_name: str = Field(default="openai/gsm8k", description="Hugging Face dataset id")
    dataset_config: str = Field(default="main", description="Dataset configuration ('main' or 'socratic')")
    data_path: str | None = Field(
        default=None,
        description="A local JSONL file of {'question', 'answer'} lines to use instead of the hub (split by eval_size)",
    )
    eval_size: int = Field(default=50, ge=1, description="Test problems scored greedily at each evaluation")
    max_new_tokens: int = Field(default=256, ge=8, le=4096, description="Tokens per answer")
    temperature: float = Field(default=1.0, ge=0, description="Sampling temperature of training rollouts")
    seed: int = Field(default=0, description="Seed of the training order")


def reference_answer(answer: str) -> str:
    """The number after the dataset answer's `####`, normalised."""
    return normalise(answer.split("####")[-1])


def normalise(text: str) -> str:
    match = _NUMBER.search(text.replace("$", ""))
    if match is None:
        return ""
    number = match.group(0).replace(",", "")
    if "." in number:
        number = number.rstrip("0").rstrip(".")
    return number


def extract_answer(completion: str) -> str:
    """The model's final number: after its last `####`, else the last number it wrote."""
    text = completion or ""
    if "####" in text:
        return normalise(text.rsplit("####", 1)[1])
    numbers = _NUMBER.findall(text.replace("$", ""))
    return normalise(numbers[-1]) if numbers else ""


def score(completion: str, answer: str) -> float:
    expected = reference_answer(answer)
    return 1.0 if expected != "" and extract_answer(completion) == expected else 0.0


def build_messages(question: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": question}]


def _offline() -> bool:
    return any(
        os.environ.get(name, "").strip().lower() in _OFFLINE_VALUES
        for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")
    )


def load_problems(config: GSM8KEnvConfig) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    """(train, test) problems from `data_path` or the hub; an error that names the dataset."""
    if config.data_path:
        path = Path(config.data_path).expanduser()
        try:
            rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        except (OSError, ValueError) as exc:
            raise RuntimeError(f"Cannot read GSM8K problems from data_path {path}: {exc}") from exc
        rows = [{"question": r["question"], "answer": r["answer"]} for r in rows if "question" in r and "answer" in r]
        n_eval = min(config.eval_size, max(1, len(rows) // 5))
        if len(rows) <= n_eval:
            raise RuntimeError(f"data_path {path} has {len(rows)} usable problems; at least {n_eval + 1} are needed")
        return rows[n_eval:], rows[:n_eval]
    try:
        from datasets import load_dataset  # heavy, and only needed for the hub

        data = load_dataset(config.dataset_name, config.dataset_config)
        train = [{"question": r["question"], "answer": r["answer"]} for r in data["train"]]
        test = [{"question": r["question"], "answer": r["answer"]} for r in data["test"]]
    except Exception as exc:  # any hub/cache failure gets the same actionable message
        why = (
            "HF_HUB_OFFLINE is set, so nothing is downloaded and no cached copy was found; unset it where the "
            "hub is reachable"
            if _offline()
            else "Check the network connection to huggingface.co"
        )
        raise RuntimeError(
            f"Could not load the dataset {config.dataset_name!r} (config {config.dataset_config!r}) from the "
            f"Hugging Face hub: {type(exc).__name__}: {exc}. {why}, or set data_path to a local JSONL file of "
            "question/answer lines."
        ) from exc
    return train, test[: config.eval_size]


class GSM8KEnv(SingleTurnEnv):
    """GSM8K math word problems (openai/gsm8k from the hub); reward 1 for the right final number."""

    name = "gsm8k"
    env_config_cls = GSM8KEnvConfig

    def __init__(self, config: GSM8KEnvConfig, server_configs: Any, slurm: bool = False, testing: bool = False):
        super().__init__(config, server_configs, slurm, testing)
        self.config: GSM8KEnvConfig = config

    @classmethod
    def default_settings(cls) -> dict[str, Any]:
        return {"group_size": 8, "total_steps": 100, "steps_per_eval": 25, "max_token_length": 1024}

    async def setup(self) -> None:
        self.train_problems, self.eval_problems = load_problems(self.config)

    def messages(self, item: dict[str, str]) -> list[dict[str, str]]:
        return build_messages(item["question"])

    def score(self, text: str, item: dict[str, str]) -> float:
        return score(text, item["answer"])


if __name__ == "__main__":
    GSM8KEnv.cli()
