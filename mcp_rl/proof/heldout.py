"""The held-out items of the bundled single-turn environments, as the trainer (and the checkpoint
evaluation tool) sample and grade them: the same items every evaluation, never trained on.

    a task      (mcp_rl.task) its held_out_items(), graded by its own score(); ids are the
                prompt text the model sees (numbered when two are alike)
    arithmetic  the environment's eval split: >= 200 problems at the defaults, disjoint from the
                training problems up to commutation, none of them a few-shot example
    gsm8k       the first `eval_size` problems of the dataset's test split
    GEM         multi-turn games: its fixed eval seeds are played by the environment's own
                evaluate() (gem_env.eval_seeds), run by mcp_rl.proof.env_eval, not here
    any other   its own evaluate(), if it has one (mcp_rl.proof.env_eval); no items here
                (NoHeldOutItems says so)

Each set carries the environment's evaluation sampling (greedy, its answer length).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict

from mcp_rl.errors import UserError
from mcp_rl.proof.verdict import ConstantBaseline, best_constant
from mcp_rl.runconfig import EnvironmentRef
from mcp_rl.task import prompt_text

# The environments whose held-out items this module makes.
ITEM_ENVIRONMENTS = ("arithmetic", "gsm8k")


def is_gem(environment: str) -> bool:
    return environment.startswith("gem") or environment.startswith("game:")


class NoHeldOutItems(UserError):
    """The environment has no held-out items mcp-rl can evaluate on its own."""


class HeldOutItem(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str  # stable across evaluations and runs with the same environment config
    messages: list[dict[str, str]]
    # What the grader is given with a completion: the reference for arithmetic, gsm8k's worked
    # solution, a task's item index. Never shown as the item's answer: `reference` is.
    answer: str
    # The item's reference answer as a model would give it (shown beside sample completions, tried
    # as a constant answer); None when the environment gives none (a task whose reference() is None).
    reference: str | None = None
    # The item's label for the held-out figures per group (a task's metadata(item)), when it has one.
    group: str | None = None


class HeldOutSet(BaseModel):
    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    environment: str
    description: str
    items: list[HeldOutItem]
    max_tokens: int
    temperature: float = 0.0  # greedy unless the environment says otherwise
    grader: Callable[[str, str], float]  # (completion text, answer) -> score

    def grade(self, item: HeldOutItem, completion: str) -> float:
        return float(self.grader(completion, item.answer))

    def references(self) -> list[str]:
        """The items' reference answers, where they have one (the constant baseline's candidates)."""
        return [item.reference for item in self.items if item.reference is not None]

    def constant_baseline(self, completions: Mapping[str, Sequence[str]]) -> ConstantBaseline | None:
        """What the best constant answer scores on these items by their own grader: candidates are
        the most common of each evaluation's answers (`completions`, by name: "step 0") and of the
        references (the run's evaluations and a checkpoint's evaluation make it alike)."""
        return best_constant(
            [item.answer for item in self.items],
            lambda text, i: self.grade(self.items[i], text),
            completions,
            self.references(),
            [item.group for item in self.items],
        )

    def limited(self, limit: int | None) -> HeldOutSet:
        """The first `limit` items (a run's `held_out_limit`; all of them when None or more): the
        same items at every evaluation of the run and in its checkpoint evaluations."""
        if limit is None or limit >= len(self.items):
            return self
        return self.model_copy(
            update={"items": self.items[:limit], "description": f"the first {limit} of {self.description}"}
        )


def held_out_set(environment: str | EnvironmentRef, env_config: dict[str, Any]) -> HeldOutSet:
    """The held-out items of `environment` (a bundled name, or the run's environment reference,
    which also finds tasks) with the run's environment config (run.yaml `env`)."""
    if isinstance(environment, EnvironmentRef):
        if is_task(environment):
            return _task(environment, env_config)
        environment = environment.name
    if environment == "arithmetic":
        return _arithmetic(env_config)
    if environment == "gsm8k":
        return _gsm8k(env_config)
    if is_gem(environment):
        raise NoHeldOutItems(
            f"environment {environment!r} is multi-turn: its held-out evaluation plays fixed eval seeds inside the "
            "environment (its evaluate()), not single prompts mcp-rl can grade on its own."
        )
    raise NoHeldOutItems(
        f"environment {environment!r} has no held-out items mcp-rl knows: it is evaluated by its own evaluate(), "
        "when its class has one. Give it an eval split and an evaluate() that reports per-item samples through "
        "evaluate_log to see held-out figures."
    )


def _fields(cls: Any, env_config: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in env_config.items() if k in cls.model_fields}


def _arithmetic(env_config: dict[str, Any]) -> HeldOutSet:
    # atroposlib comes with the environment module: imported only when a run evaluates
    from mcp_rl.environments.bundled import arithmetic as arith

    config = arith.ArithmeticEnvConfig(**_fields(arith.ArithmeticEnvConfig, env_config))
    _, problems = arith.make_problems(config)
    items = [
        HeldOutItem(
            id=arith.question(p),
            messages=arith.build_messages(p, config.few_shot),
            answer=str(p["answer"]),
            reference=str(p["answer"]),
        )
        for p in problems
    ]
    return HeldOutSet(
        environment="arithmetic",
        description=f"{len(items)} held-out arithmetic problems (none trained on, up to commutation)",
        items=items,
        max_tokens=config.max_new_tokens,
        grader=lambda text, answer: arith.score_answer(text, int(answer)),
    )


def _gsm8k(env_config: dict[str, Any]) -> HeldOutSet:
    # atroposlib (and datasets, for the hub) come with the environment module
    from mcp_rl.environments.bundled import gsm8k

    config = gsm8k.GSM8KEnvConfig(**_fields(gsm8k.GSM8KEnvConfig, env_config))
    try:
        _, problems = gsm8k.load_problems(config)
    except RuntimeError as exc:
        raise NoHeldOutItems(f"gsm8k's test split is not available: {exc}") from exc
    items = [
        HeldOutItem(
            id=f"test-{i}",
            messages=gsm8k.build_messages(p["question"]),
            answer=p["answer"],
            reference=gsm8k.reference_answer(p["answer"]) or None,
        )
        for i, p in enumerate(problems)
    ]
    return HeldOutSet(
        environment="gsm8k",
        description=f"the first {len(items)} problems of gsm8k's test split",
        items=items,
        max_tokens=config.max_new_tokens,
        grader=gsm8k.score,
    )


# A label longer than this is cut (labels are meant to be short: "difficulty=hard").
LABEL_CHARS = 80


def _label(task: Any, problem: Any) -> str | None:
    """The task's metadata(item) as one label, "key=value" pairs sorted by key ({"count": 3} ->
    "count=3"); None when it has none or it cannot be read (a label is never worth a failed run)."""
    try:
        labels = task.metadata(problem)
    except Exception:
        return None
    if not isinstance(labels, dict) or not labels:
        return None
    return ", ".join(f"{k}={v}" for k, v in sorted((str(k), str(v)) for k, v in labels.items()))[:LABEL_CHARS]


def _reference(task: Any, problem: Any) -> str | None:
    """The task's reference(item) (None when it has none or it cannot be read: a missing label is
    never worth a failed run)."""
    try:
        reference = task.reference(problem)
    except Exception:
        return None
    return reference if isinstance(reference, str) else None


def is_task(ref: EnvironmentRef) -> bool:
    """True when the reference names a mcp_rl.task.Task subclass (read from source, not imported)."""
    # the AST scan of discovery (stdlib only)
    from mcp_rl.environments.discovery import task_class_names

    return ref.class_name in task_class_names(ref.file_path)


def _task(ref: EnvironmentRef, env_config: dict[str, Any]) -> HeldOutSet:
    # the user's task file (and whatever it imports): only in processes that evaluate
    from mcp_rl.environments.discovery import declared_env_vars
    from mcp_rl.environments.loader import load_task
    from mcp_rl.settings import hide_keys_from_task_code
    from mcp_rl.task import Task

    # This process (the trainer, an evaluation worker) holds keys its clients already have: the
    # task's code does not see them unless it names them.
    hide_keys_from_task_code(declared_env_vars(ref.file_path, ref.class_name))
    task = load_task(ref.file_path, ref.class_name, ref.project_root)
    problems = list(task.held_out_items())
    if not problems:
        raise NoHeldOutItems(
            f"task {ref.name!r} has no held-out items: give {ref.class_name} held_out_seeds (with item(seed)) or "
            "a held_out_items() that returns them (200 is a good size)."
        )
    items = []
    seen: dict[str, int] = {}
    for i, problem in enumerate(problems):
        messages = [dict(m) for m in task.messages(problem)]
        text = prompt_text(messages)
        seen[text] = seen.get(text, 0) + 1
        item_id = text if seen[text] == 1 else f"{text} #{seen[text]}"
        items.append(
            HeldOutItem(
                id=item_id,
                messages=messages,
                answer=str(i),
                reference=_reference(task, problem),
                group=_label(task, problem),
            )
        )

    def grade(completion: str, index: str, task: Task = task, problems: list[Any] = problems) -> float:
        # the task's own bounds check (task_env imports atroposlib; this must not)
        value = float(task.score(completion, problems[int(index)]))
        low, high = task.score_range
        if not math.isfinite(value) or not low <= value <= high:
            raise ValueError(
                f"{type(task).__name__}.score returned {value!r} for held-out item {problems[int(index)]!r}: "
                f"scores must be finite and within score_range {task.score_range}"
            )
        return value

    max_tokens = int(env_config.get("max_new_tokens") or task.max_tokens)
    return HeldOutSet(
        environment=ref.name,
        description=f"{len(items)} held-out items of task {ref.name!r} (its held_out_items(), never trained on)",
        items=items,
        max_tokens=max_tokens,
        grader=grade,
    )
