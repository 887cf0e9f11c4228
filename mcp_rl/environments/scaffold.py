"""A new task file from a template (rl_new_environment, `mcp-rl new-env NAME`).

The file is a complete, working task on the public interface (mcp_rl.task): seeded training and
held-out items that never overlap, a few-shot chat, an exact-match score with reference answers.
It trains as written; the user edits `item`, `prompt`/`messages` and `score` into their own task.

It is written into the folder asked for, else the first MCP_RL_ENV_PATHS folder, else
$MCP_RL_HOME/envs (always searched). An existing file is never replaced, and the file appears
whole or not at all (written beside it, then linked into place).
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

from pydantic import BaseModel, Field

from mcp_rl.errors import UserError
from mcp_rl.settings import Settings

NAME = re.compile(r"^[a-z][a-z0-9_]{0,47}$")

TEMPLATE = '''"""{title}: a task on mcp-rl's task interface (mcp_rl.task).

Edit item(), messages() and score() into your task; keep the held-out seeds apart from the
training seeds. Then: rl_validate_environment("{name}"), rl_test_inference, rl_start_training.
"""

from __future__ import annotations

import random
import re

from mcp_rl.task import Task

# A bare number, maybe with spaces or a final period around it.
_NUMBER = re.compile(r"^\\s*(-?\\d+)\\s*\\.?\\s*$")


def _split() -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """Every pair of operands 1..20, shuffled once: 200 held out, the rest for training. A pair
    and its swap (3 + 5, 5 + 3) stay on the same side, so no held-out question is trained on."""
    pairs = [(a, b) for a in range(1, 21) for b in range(a, 21)]
    random.Random(0).shuffle(pairs)
    swapped = lambda ps: [(a, b) for p in ps for (a, b) in {{p, p[::-1]}}]  # noqa: E731
    return swapped(pairs[110:]), swapped(pairs[:110])[:200]


class {class_name}(Task):
    """Add two numbers; reply with only the result (edit this line: rl_list_environments shows it)."""

    name = "{name}"
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
        return {{"a": a, "b": b, "answer": str(a + b)}}

    def messages(self, item: dict) -> list[dict[str, str]]:
        # Two worked examples show a small model the format, so some answers score from the start
        # (a group whose answers all score the same teaches nothing). prompt(item) is enough when
        # no examples are needed.
        return [
            {{"role": "system", "content": self.system_prompt}},
            {{"role": "user", "content": "3 + 4"}},
            {{"role": "assistant", "content": "7"}},
            {{"role": "user", "content": "12 + 5"}},
            {{"role": "assistant", "content": "17"}},
            {{"role": "user", "content": f"{{item['a']}} + {{item['b']}}"}},
        ]

    def score(self, completion: str, item: dict) -> float:
        match = _NUMBER.match(completion)
        return 1.0 if match is not None and match.group(1) == item["answer"] else 0.0

    def metadata(self, item: dict) -> dict[str, str]:
        # Labels for grouping the held-out figures (optional).
        return {{"carry": "yes" if item["a"] % 10 + item["b"] % 10 >= 10 else "no"}}
'''


class NewEnvironment(BaseModel):
    """rl_new_environment's answer."""

    name: str = Field(description="The task's name: pass it to rl_select_environment.")
    path: str = Field(description="The file written.")
    folder: str
    searched: bool = Field(description="True: the folder is searched for environments (rl_list_environments lists it).")
    edit: list[str] = Field(description="What to change in the file to make it your task.")
    next_calls: list[str]
    notes: list[str] = []


def class_name_of(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("_") if part) or "MyTask"


def default_folder(settings: Settings) -> Path:
    """The first MCP_RL_ENV_PATHS folder, else $MCP_RL_HOME/envs."""
    return settings.env_paths[0] if settings.env_paths else settings.user_envs_dir


def new_task_file(settings: Settings, name: str, folder: str | Path | None = None) -> NewEnvironment:
    """Write NAME.py, a working task, into `folder`; UserError (nothing written) when the name is
    not a lowercase identifier, the folder is not usable, or the file exists."""
    name = (name or "").strip()
    if not NAME.match(name):
        raise UserError(
            f"name {name!r} is not usable: give a lowercase Python identifier (letters, digits, underscores; "
            "starts with a letter; at most 48 characters), e.g. 'larger_number'."
        )
    target = Path(folder).expanduser() if folder else default_folder(settings)
    if not target.is_absolute():
        raise UserError(f"folder {str(folder)!r} is relative: give an absolute path.")
    if target.exists() and not target.is_dir():
        raise UserError(f"folder {target} exists and is not a folder.")
    try:
        target.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"folder {target} cannot be created: {exc.strerror or exc}") from None
    path = target / f"{name}.py"
    if path.exists():
        raise UserError(f"{path} exists: nothing was written. Pick another name, or edit that file.")
    text = TEMPLATE.format(name=name, class_name=class_name_of(name), title=name.replace("_", " ").capitalize())
    fd, temp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=target)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        try:
            os.link(temp, path)  # fails if the file appeared meanwhile: never replaced
        except FileExistsError:
            raise UserError(f"{path} exists: nothing was written. Pick another name, or edit that file.") from None
    finally:
        os.unlink(temp)
    resolved = target.resolve()
    searched = any(resolved == d.expanduser().resolve() for d in settings.environment_dirs())
    notes = []
    if not searched:
        notes.append(
            f"{resolved} is not searched for environments: add it to MCP_RL_ENV_PATHS (and restart the server) "
            "to list and select this task."
        )
    return NewEnvironment(
        name=name,
        path=str(path.resolve()),
        folder=str(resolved),
        searched=searched,
        edit=[
            "item(seed): what one problem is (keep 'answer' as a string when you know the right answer)",
            "messages(item) (or prompt(item) for a single user message): what the model sees",
            "score(completion, item): what an answer is worth, within score_range",
            "train_seeds / held_out_seeds (or train_items() / held_out_items()): disjoint; ~200 held out",
            "max_tokens, system_prompt, the class docstring; metadata(item) to group the held-out figures",
        ],
        next_calls=[
            f"rl_validate_environment(name='{name}') after each edit: items, overlap, scores, the base model's answers",
            f"rl_select_environment(name='{name}')",
            "rl_test_inference() to smoke-test it against the base model",
            "rl_start_training(); then rl_check_status shows held_out: base -> trained with the paired test",
        ],
        notes=notes,
    )
