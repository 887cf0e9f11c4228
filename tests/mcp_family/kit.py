"""Helpers of the MCP family's tests: a character tokenizer whose chat template is real Jinja, a
scripted policy, and task files pointing at the tiny stdio server fixture."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import jinja2

from mcp_rl.environments.mcp_family.episode import Sample

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "mcp_tasks"
TINY_SERVER = FIXTURES / "tiny_server.py"

# SmolLM2-135M-Instruct's template (no tool support): the fallback path.
SMOL_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant<|im_end|>\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
# A Hermes/Qwen-style template that lists `tools` in the system turn: the template path.
TOOLS_TEMPLATE = (
    "{% if tools %}<|im_start|>system\nTOOLS:{% for t in tools %}\n{{ t | tojson }}{% endfor %}<|im_end|>\n{% endif %}"
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


class CharTokenizer:
    """One token per character (so encode(a) + encode(b) == encode(a + b) and masks can be read
    back as text); the end token is one id of its own."""

    eos_token = "<|im_end|>"
    eos_token_id = 0

    def __init__(self, template: str) -> None:
        self.chat_template = template
        environment = jinja2.Environment()
        environment.filters["tojson"] = lambda value: json.dumps(value, sort_keys=True)
        self._template = environment.from_string(template)

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        out: list[int] = []
        parts = text.split(self.eos_token)
        for i, part in enumerate(parts):
            out.extend(ord(c) for c in part)
            if i < len(parts) - 1:
                out.append(self.eos_token_id)
        return out

    def decode(self, tokens: list[int]) -> str:
        return "".join(self.eos_token if t == self.eos_token_id else chr(t) for t in tokens)

    def apply_chat_template(
        self,
        messages: list[dict[str, Any]],
        tools: Any = None,
        tokenize: bool = False,
        add_generation_prompt: bool = False,
    ) -> str:
        return self._template.render(messages=messages, tools=tools, add_generation_prompt=add_generation_prompt)


class ScriptedPolicy:
    """Replies with the next scripted text (ending with the end token, as a sampler does)."""

    def __init__(self, tokenizer: CharTokenizer, replies: list[str]) -> None:
        self.tokenizer, self.replies = tokenizer, list(replies)
        self.prompts: list[list[int]] = []

    async def __call__(self, tokens: list[int], max_tokens: int) -> Sample:
        self.prompts.append(tokens)
        text = self.replies.pop(0) if self.replies else "I give up"
        ids = [ord(c) for c in text][:max_tokens] + [self.tokenizer.eos_token_id]
        return Sample(tokens=ids, logprobs=[-0.5] * len(ids), text=text)


def call(name: str, **arguments: Any) -> str:
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


def write_task(folder: Path, *, extra: str = "", limits: str = "", env_vars: str = "[CAPITALS_EXTRA]") -> Path:
    """A task file on the tiny server (started with this interpreter) and the capitals scenarios."""
    (folder / "capitals.jsonl").write_text((FIXTURES / "capitals.jsonl").read_text())
    limits = (
        limits or "{max_turns: 4, max_tool_calls: 3, call_timeout_s: 2, output_bytes: 200, max_tokens_per_turn: 200}"
    )
    path = folder / "capitals.mcp.yaml"
    path.write_text(
        "name: capitals\n"
        f"server:\n  command: {json.dumps(sys.executable)}\n  args: [{json.dumps(str(TINY_SERVER))}]\n"
        f"  env_vars: {env_vars}\n"
        "scenarios: capitals.jsonl\nheld_out_fraction: 0.5\n"
        f"limits: {limits}\n{extra}"
    )
    return path
