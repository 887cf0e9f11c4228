"""The runner's side of the public task interface (mcp_rl.task): a `Task` becomes an Atropos
environment the pipeline trains like the bundled arithmetic one.

`env_class_for(TaskClass)` is a `BaseEnv` subclass whose items are the task's training items,
whose chat is the task's `messages(item)`, and whose groups are scored by the task's `score`
(checked finite and within `score_range`). Sampling, prompt masks, per-token logprobs, the resume
skip and the accuracy metric are every single-turn environment's (mcp_rl.environments.single_turn:
both Atropos server types, so both backends and the smoke tests' `process` mode work). The held-out items are evaluated by the trainer
(mcp_rl.proof.heldout), not here; evaluate() only serves Atropos's own `evaluate` mode.

Imported only in child processes (it pulls in atroposlib): the loader wraps a task class with it.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

from atroposlib.envs.base import BaseEnvConfig
from pydantic import Field

from mcp_rl.environments.single_turn import SingleTurnEnv
from mcp_rl.task import Item, Task, prompt_text


class TaskScoreError(ValueError):
    """A task's score() returned something that is not a number within its score_range."""


class TaskEnvConfig(BaseEnvConfig):
    max_new_tokens: int = Field(
        default=16, ge=1, le=4096, description="Tokens per answer (default: the task's max_tokens)"
    )
    temperature: float = Field(default=1.0, ge=0, description="Sampling temperature of training rollouts")
    seed: int = Field(default=0, description="Seed of the training order")


def task_name(task_cls: type[Task], file_path: Path | None = None) -> str:
    """The name the task is listed and selected by: its `name`, else its file's name."""
    if task_cls.name:
        return task_cls.name
    return Path(file_path).stem if file_path is not None else task_cls.__name__


def checked_score(task: Task, completion: str, item: Item) -> float:
    """task.score as a float, refused (TaskScoreError, naming the item) when it is not finite
    or outside the task's score_range."""
    raw = task.score(completion, item)
    try:
        value = float(raw)
    except (TypeError, ValueError):
        raise TaskScoreError(
            f"{type(task).__name__}.score returned {raw!r} for item {item!r}: it must return a number"
        ) from None
    low, high = task.score_range
    if not math.isfinite(value) or not low <= value <= high:
        raise TaskScoreError(
            f"{type(task).__name__}.score returned {value!r} for item {item!r} and answer {completion!r}: "
            f"scores must be finite and within score_range {task.score_range}"
        )
    return value


class TaskEnv(SingleTurnEnv):
    """An Atropos environment made from a `Task` (subclassed per task by env_class_for)."""

    name = "task"
    env_config_cls = TaskEnvConfig
    task_class: type[Task] = Task

    def __init__(self, config: TaskEnvConfig, server_configs: Any, slurm: bool = False, testing: bool = False):
        super().__init__(config, server_configs, slurm, testing)
        self.config: TaskEnvConfig = config
        self.task = self.task_class()
        self.train_problems = list(self.task.train_items())
        self.eval_problems = list(self.task.held_out_items())
        # A held-out question is never trained on, whatever the task's items say (the validator
        # reports such items; here they are only left out of training).
        held = {prompt_text(self.task.messages(item)) for item in self.eval_problems}
        kept = [item for item in self.train_problems if prompt_text(self.task.messages(item)) not in held]
        if len(kept) < len(self.train_problems):
            print(
                f"{len(self.train_problems) - len(kept)} training items ask a held-out question: left out of training",
                file=sys.stderr,
            )
        self.train_problems = kept
        if not self.train_problems:
            raise ValueError(f"{self.task_class.__name__} has no training items (train_items() is empty)")

    @classmethod
    def default_settings(cls) -> dict[str, Any]:
        return {
            # arithmetic's measured defaults: 8 items x 4 answers a step, every group kept
            "group_size": 4,
            "total_steps": 30,
            "steps_per_eval": 1000000,
            # room for the task's prompt: a group longer than this is dropped by Atropos
            "max_token_length": max(512, cls.task_class.max_tokens + 512),
            "ensure_scores_are_not_same": False,
            "max_new_tokens": cls.task_class.max_tokens,
        }

    async def setup(self) -> None:
        """Nothing to download: the items were made in __init__."""

    def messages(self, item: Item) -> list[dict[str, str]]:
        return self.task.messages(item)

    def score(self, text: str, item: Item) -> float:
        return checked_score(self.task, text, item)


def env_class_for(task_cls: type[Task], file_path: Path | None = None) -> type[TaskEnv]:
    """The Atropos environment class of `task_cls` (named and placed like it, so the runner's
    messages and Atropos's CLI name the user's class)."""
    attrs = {
        "name": task_name(task_cls, file_path),
        "task_class": task_cls,
        "__module__": task_cls.__module__,
        "__qualname__": task_cls.__qualname__,
        "__doc__": task_cls.__doc__,
    }
    return type(task_cls.__name__, (TaskEnv,), attrs)
