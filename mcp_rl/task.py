"""mcp-rl's public task interface: the one module a task file imports (stable; stdlib only).

A task file is a Python file in a folder on `MCP_RL_ENV_PATHS` with a subclass of `Task`. It says
only what the user knows; mcp-rl does the rest (tokens, masks, logprobs, groups, resume, the
held-out evaluation at step 0 and at the end, smoke tests, both backends)::

    import random
    from mcp_rl.task import Task

    PAIRS = [(a, b) for a in range(10, 100) for b in range(10, 100) if a != b]
    random.Random(0).shuffle(PAIRS)       # 200 held out, the rest for training: disjoint

    class LargerNumber(Task):
        '''Reply with the larger of two numbers.'''

        name = "larger_number"            # what rl_select_environment takes (default: the file name)
        system_prompt = "Reply with only the larger number."
        max_tokens = 8                    # tokens per answer
        score_range = (0.0, 1.0)          # every score lies in it (the validator checks)

        def train_items(self):            # any JSON-like dicts
            return [{"a": a, "b": b, "answer": str(max(a, b))} for a, b in PAIRS[200:]]

        def held_out_items(self):         # never trained on; evaluated at step 0 and at the end
            return [{"a": a, "b": b, "answer": str(max(a, b))} for a, b in PAIRS[:200]]

        def prompt(self, item):           # the user message the model sees
            return f"{item['a']} or {item['b']}?"

        def score(self, completion, item):
            return 1.0 if completion.strip() == item["answer"] else 0.0

Instead of lists a task may define `item(seed)` with `train_seeds` and `held_out_seeds` (whose
items must not ask the same question: the validator checks); instead of `prompt` it may return the
whole chat from `messages(item)` (e.g. with worked examples). `reference(item)` (default: the
item's "answer") is an answer that must score the top of `score_range`; `metadata(item)` (a dict
of short strings) groups the held-out figures. Everything is single-turn: one prompt, one answer.

An Atropos `BaseEnv` written outside mcp-rl needs nothing from mcp-rl; the conventions of the
scored groups mcp-rl's trainer reads are here too (MASKED, PROMPT_LOGPROB,
groups_already_trained), so such an environment imports this module at most.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

__all__ = [
    "MASKED",
    "PROMPT_LOGPROB",
    "Item",
    "Task",
    "groups_already_trained",
    "prompt_text",
]

# The label of a token the trainer must not learn: a scored group's `masks` repeat its `tokens`
# with the prompt's positions replaced by MASKED (also the ignore index of torch's losses).
MASKED = -100
# Atropos's placeholder logprob at prompt positions of `inference_logprobs` (never trained on).
PROMPT_LOGPROB = 1.0

Item = dict[str, Any]


def groups_already_trained(curr_step: int, batch_size: int, group_size: int) -> int:
    """Groups the trainer consumed before a resumed run's first step (Atropos tells a
    registering environment `starting_step`, as `self.curr_step`): a resumed environment skips
    that many items so it continues its data order instead of replaying it from the start."""
    if curr_step <= 0 or batch_size <= 0 or group_size <= 0:
        return 0
    return curr_step * batch_size // group_size


def prompt_text(messages: list[dict[str, str]]) -> str:
    """The question a chat asks: its last user message (the whole chat when there is none). The
    held-out items are told apart, and kept apart from training items, by it."""
    for message in reversed(messages):
        if message.get("role") == "user":
            return str(message.get("content", ""))
    return "\n".join(str(m.get("content", "")) for m in messages)


class Task:
    """A single-turn task: items, the chat for an item, and a score for an answer.

    Override `score` and either `item` (with `train_seeds`, `held_out_seeds`) or
    `train_items` and `held_out_items`; and either `prompt` or `messages`."""

    # What rl_list_environments shows and rl_select_environment takes; default: the file's name.
    name: ClassVar[str] = ""
    # Sent as the first (system) message of every chat built from `prompt`; None for none.
    system_prompt: ClassVar[str | None] = None
    # The longest answer sampled, in tokens (training and evaluation).
    max_tokens: ClassVar[int] = 16
    # (lowest, highest) score; a score outside it stops the run with the item that gave it.
    score_range: ClassVar[tuple[float, float]] = (0.0, 1.0)
    # Variables of the server's environment this task's code needs (e.g. ("MY_SERVICE_API_KEY",)):
    # a literal tuple of names, read from the file without importing it. Task code runs with
    # PATH, HOME, locale, proxies and similar settings only; each name listed here is added (also
    # one of mcp-rl's own keys, such as HF_TOKEN, if the task really needs it), nothing else.
    env_vars: ClassVar[Sequence[str]] = ()
    # Seeds of item(seed): the training set and the held-out set (must not share an item).
    train_seeds: ClassVar[Sequence[int]] = ()
    held_out_seeds: ClassVar[Sequence[int]] = ()

    # -- items --------------------------------------------------------------------------------
    def item(self, seed: int) -> Item:
        """The item of `seed` (same seed, same item). Used unless train_items/held_out_items are."""
        raise NotImplementedError(
            f"{type(self).__name__} defines neither item(seed) nor train_items()/held_out_items()"
        )

    def train_items(self) -> Sequence[Item]:
        """The items training draws from (shuffled, repeated as needed)."""
        return [self.item(seed) for seed in self.train_seeds]

    def held_out_items(self) -> Sequence[Item]:
        """The items never trained on: evaluated greedily at step 0 and at the end (>= 100
        items make a gain provable; 200 is a good size)."""
        return [self.item(seed) for seed in self.held_out_seeds]

    # -- what the model sees --------------------------------------------------------------------
    def prompt(self, item: Item) -> str:
        """The user message for `item`."""
        raise NotImplementedError(f"{type(self).__name__} defines neither prompt(item) nor messages(item)")

    def messages(self, item: Item) -> list[dict[str, str]]:
        """The chat for `item` ({"role", "content"} dicts); the model's answer comes next."""
        chat = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        return [*chat, {"role": "user", "content": self.prompt(item)}]

    # -- what an answer is worth ----------------------------------------------------------------
    def score(self, completion: str, item: Item) -> float:
        """The reward of `completion` (the model's answer text) for `item`, within score_range."""
        raise NotImplementedError(f"{type(self).__name__} defines no score(completion, item)")

    def reference(self, item: Item) -> str | None:
        """A correct answer, if the task knows one (the validator checks it scores the top of
        score_range); default: the item's "answer" when it is a string."""
        answer = item.get("answer") if isinstance(item, dict) else None
        return answer if isinstance(answer, str) else None

    def metadata(self, item: Item) -> dict[str, str]:
        """Short labels of `item` (e.g. {"difficulty": "hard"}): held-out figures per label."""
        return {}
