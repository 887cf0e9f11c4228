"""Template task: a task on mcp-rl's task interface (mcp_rl.task).

Make it your task by editing train_items() and held_out_items() (the items, each built by make()),
messages() (what the model sees) and score() (what an answer is worth); keep the held-out items
apart from the training items. Then: rl_validate_environment("template_task"), rl_test_inference,
rl_start_training.
"""

# This file is the template rl_new_environment copies (mcp_rl.environments.scaffold): a real
# module, so lint and type checks read it; the copy has `template_task`, `TemplateTask` and
# `Template task` replaced by the new task's name, class and title.

from __future__ import annotations

import random
import re

from mcp_rl.task import Task

# A bare number, maybe with spaces or a final period around it.
_NUMBER = re.compile(r"^\s*(-?\d+)\s*\.?\s*$")


def _split() -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """Every pair of operands 1..20, shuffled once: 200 held out, the rest for training. A pair
    and its swap (3 + 5, 5 + 3) stay on the same side, so no held-out question is trained on."""
    pairs = [(a, b) for a in range(1, 21) for b in range(a, 21)]
    random.Random(0).shuffle(pairs)

    def swapped(chosen: list[tuple[int, int]]) -> list[tuple[int, int]]:
        return [(a, b) for pair in chosen for (a, b) in {pair, (pair[1], pair[0])}]

    return swapped(pairs[110:]), swapped(pairs[:110])[:200]


class TemplateTask(Task):
    """Add two numbers; reply with only the result (edit this line: rl_list_environments shows it)."""

    name = "template_task"
    system_prompt = "You are a calculator. Reply with only the result."
    max_tokens = 8  # tokens per answer
    score_range = (0.0, 1.0)  # every score lies in it

    # Training draws from train_items() (shuffled, repeated); the held-out items are evaluated
    # greedily at step 0 and at the end. They must never share a question (the validator checks);
    # 200 held-out items can show a gain. (Or define item(seed) with train_seeds and held_out_seeds.)
    def train_items(self) -> list[dict]:
        return [self.make(a, b) for a, b in _split()[0]]

    def held_out_items(self) -> list[dict]:
        return [self.make(a, b) for a, b in _split()[1]]

    def make(self, a: int, b: int) -> dict:
        # "answer" (a string) is the reference answer the validator checks score() against.
        return {"a": a, "b": b, "answer": str(a + b)}

    def messages(self, item: dict) -> list[dict[str, str]]:
        # Two worked examples show a small model the format, so some answers score from the start
        # (a group whose answers all score the same teaches nothing). prompt(item) is enough when
        # no examples are needed.
        return [
            {"role": "system", "content": self.system_prompt},
            {"role": "user", "content": "3 + 4"},
            {"role": "assistant", "content": "7"},
            {"role": "user", "content": "12 + 5"},
            {"role": "assistant", "content": "17"},
            {"role": "user", "content": f"{item['a']} + {item['b']}"},
        ]

    def score(self, completion: str, item: dict) -> float:
        match = _NUMBER.match(completion)
        return 1.0 if match is not None and match.group(1) == item["answer"] else 0.0

    def metadata(self, item: dict) -> dict[str, str]:
        # Labels for grouping the held-out figures (optional).
        return {"carry": "yes" if item["a"] % 10 + item["b"] % 10 >= 10 else "no"}
