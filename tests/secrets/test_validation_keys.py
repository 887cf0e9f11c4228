"""No key of the server reaches a tool answer or a file, whatever a task does with it.

The real server runs as a stdio subprocess with fake keys in its environment (Tinker, OpenRouter,
W&B, both Hub token spellings, the HTTP token). Tasks written here (not shaped like our fixtures)
try to get them out through rl_validate_environment: an exception message, stderr before a
crash, a reference answer, in plain, unprefixed, base64 (also of `user:key`) and URL-encoded
form. A task that names no key must not even see one; a task that names them all (env_vars) gets
them, and the scrubber must keep every form out of every answer and every file under
MCP_RL_HOME. A task printing `{"ok": true}` on stdout cannot pass.
"""

from __future__ import annotations

import base64
import json
import urllib.parse
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from tests.conftest import stdio_params

pytestmark = pytest.mark.anyio

KEYS = {
    "TINKER_API_KEY": "tml-7Qz2LkVb9XwA4dRt1mNc8PyE3sHu6GjK",
    "OPENROUTER_API_KEY": "sk-or-v1-d41d8cd98f00b204e9800998ecf8427e0a1b2c3d",
    "WANDB_API_KEY": "5f1e2d3c4b5a69788796a5b4c3d2e1f0a9b8c7d6",
    "HF_TOKEN": "hf_ZyXwVuTsRqPoNmLkJiHgFeDcBa987654",
    "HUGGING_FACE_HUB_TOKEN": "hf_AliasTokenQwErTy1234567890asdfgh",
    "MCP_RL_TOKEN": "httpBearerRf4Tg5Yh6Uj7Ik8Ol9",
}
UNLISTED = {"MY_UNLISTED_SETTING": "visible-only-if-the-allow-list-leaks-4711"}

COMMON = '''
import base64, os, sys, urllib.parse
from mcp_rl.task import Task

NAMES = ("TINKER_API_KEY", "OPENROUTER_API_KEY", "WANDB_API_KEY", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "MCP_RL_TOKEN")


def leaked():
    """Every key this process can see, in every form a careless error might show it."""
    out = []
    for name in NAMES:
        value = os.environ.get(name, "")
        if not value:
            continue
        bare = value.split("_", 1)[-1] if value.startswith("hf_") else value.rsplit("-", 1)[-1]
        out += [
            value,
            bare,
            base64.b64encode(value.encode()).decode(),
            base64.urlsafe_b64encode(("user:" + value).encode()).decode().rstrip("="),
            urllib.parse.quote(value, safe=""),
        ]
    return " | ".join(out) + " || environ=" + repr(sorted(os.environ.items()))


class Base:  # a mixin, not a Task: only the class below is the file's task
    train_seeds = range(10)
    held_out_seeds = range(10, 20)

    def item(self, seed):
        return {"q": f"say {seed}", "answer": str(seed)}

    def prompt(self, item):
        return item["q"]

    def score(self, completion, item):
        return 1.0 if completion.strip() == item["answer"] else 0.0
'''

ALL_KEYS = (
    '("TINKER_API_KEY", "OPENROUTER_API_KEY", "WANDB_API_KEY", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "MCP_RL_TOKEN")'
)

TASKS = {
    # names nothing: it must not see a key at all
    "sees_nothing": """
class SeesNothing(Base, Task):
    name = "sees_nothing"

    def train_items(self):
        raise RuntimeError("what I see: " + leaked())
""",
    # names every key (as a careless task might): the scrubber keeps them in
    "raises_keys": f"""
class RaisesKeys(Base, Task):
    name = "raises_keys"
    env_vars = {ALL_KEYS}

    def train_items(self):
        raise RuntimeError("keys: " + leaked())
""",
    "stderr_keys": f"""
print("stderr: " + leaked(), file=sys.stderr, flush=True)
os._exit(3)


class StderrKeys(Base, Task):
    name = "stderr_keys"
    env_vars = {ALL_KEYS}
""",
    "reference_keys": f"""
class ReferenceKeys(Base, Task):
    name = "reference_keys"
    env_vars = {ALL_KEYS}

    def reference(self, item):
        return leaked()
""",
    # stdout is log, not the report
    "forges_ok": """
print('{"ok": true, "problems": [], "warnings": []}', flush=True)


class ForgesOk(Base, Task):
    name = "forges_ok"

    def train_items(self):
        print('{"ok": true, "problems": [], "warnings": []}', flush=True)
        raise RuntimeError("broken on purpose")
""",
    "forges_and_exits": """
print('{"ok": true, "problems": [], "warnings": []}', flush=True)
os._exit(0)


class ForgesAndExits(Base, Task):
    name = "forges_and_exits"
""",
}


def key_forms() -> dict[str, str]:
    """Each key in every form the tasks print, computed here independently of mcp_rl.redact."""
    forms: dict[str, str] = {}
    for name, value in KEYS.items():
        bare = value.split("_", 1)[-1] if value.startswith("hf_") else value.rsplit("-", 1)[-1]
        for label, text in (
            ("plain", value),
            ("unprefixed", bare),
            ("base64", base64.b64encode(value.encode()).decode()),
            ("base64 unpadded", base64.b64encode(value.encode()).decode().rstrip("=")),
            ("urlsafe base64", base64.urlsafe_b64encode(value.encode()).decode().rstrip("=")),
            ("url-encoded", urllib.parse.quote(value, safe="")),
        ):
            forms[f"{name} {label}"] = text
        # the middle of base64("user:KEY"): what survives of the key inside a longer encoding
        encoded = base64.urlsafe_b64encode(("user:" + value).encode()).decode()
        forms[f"{name} inside base64(user:key)"] = encoded[8:-8]
    return forms


# A piece of a key this long is a leak too (a message clipped in the middle of a key).
PIECE = 16


def found_in(text: str) -> list[str]:
    found = [label for label, form in key_forms().items() if form in text]
    for name, value in KEYS.items():
        pieces = {value[i : i + PIECE] for i in range(len(value) - PIECE + 1)}
        found += [f"{name} piece {p!r}" for p in pieces if p in text and p not in key_forms().values()]
    return found


def write_tasks(folder: Path) -> None:
    folder.mkdir()
    for name, body in TASKS.items():
        (folder / f"{name}.py").write_text(COMMON + body, encoding="utf-8")


async def validate(client: Client, name: str) -> tuple[bool, str, dict[str, Any] | None]:
    result = await client.call_tool("rl_validate_environment", {"name": name, "sample_base_model": False})
    text = "\n".join(getattr(c, "text", "") for c in result.content)
    return result.is_error, text + json.dumps(result.structured_content or {}), result.structured_content


async def test_no_key_leaves_through_a_validation_answer_or_a_file(home: Path, tmp_path: Path) -> None:
    envs = tmp_path / "tasks"
    write_tasks(envs)
    params = stdio_params(home, MCP_RL_ENV_PATHS=str(envs), **KEYS, **UNLISTED)
    answers: dict[str, tuple[bool, str, dict[str, Any] | None]] = {}
    async with Client(params, mode="legacy", read_timeout_seconds=120) as client:
        listed = await client.call_tool("rl_list_environments", {})
        assert not found_in(json.dumps(listed.structured_content))
        for name in TASKS:
            answers[name] = await validate(client, name)

    for name, (_, text, _) in answers.items():
        assert found_in(text) == [], f"{name}: a key left in the answer: {found_in(text)}"

    # A task that names no key sees none (nothing to scrub: not even a redaction mark), nor a
    # variable off the allow-list; what it does see (PATH) shows its environment was printed.
    is_error, text, data = answers["sees_nothing"]
    assert not is_error and data is not None and data["status"] == "failed", text
    assert "PATH" in text and "redacted" not in text and "MY_UNLISTED_SETTING" not in text, text[:2000]

    # Tasks that name the keys got them, and each came back only as a redaction mark.
    is_error, text, data = answers["raises_keys"]
    assert not is_error and data is not None and data["status"] == "failed", text
    assert "[redacted TINKER_API_KEY]" in text and "[redacted WANDB_API_KEY]" in text, text[:2000]
    is_error, text, _ = answers["stderr_keys"]
    assert is_error and "before it could report" in text and "[redacted" in text, text[:2000]
    is_error, text, data = answers["reference_keys"]
    assert not is_error and data is not None and data["status"] == "failed", text
    assert "[redacted OPENROUTER_API_KEY]" in text, text[:2000]

    # stdout is not the report channel.
    is_error, text, data = answers["forges_ok"]
    assert not is_error and data is not None and data["status"] == "failed", text
    assert data["report"]["ok"] is False and "broken on purpose" in text
    is_error, text, _ = answers["forges_and_exits"]
    assert is_error and "sent no report" in text, text

    # Every file under the state directory (reports, registry, caches, logs).
    files = [p for p in home.rglob("*") if p.is_file()]
    assert any(p.parent.name == "validations" for p in files), sorted(map(str, files))
    leaks = {str(p.relative_to(home)): found_in(p.read_bytes().decode("utf-8", "replace")) for p in files}
    assert {path: labels for path, labels in leaks.items() if labels} == {}
