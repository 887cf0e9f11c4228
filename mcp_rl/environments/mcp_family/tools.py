"""What the policy sees of the tools, and what is read back from its replies.

Tools are offered through the chat template's own tool support when it has one
(`tokenizer.apply_chat_template(messages, tools=...)`, the OpenAI function format); otherwise
(SmolLM2's default template has none) through the documented fallback: a system message that
lists the tools as JSON and asks for calls written as

    <tool_call>{"name": "tool_name", "arguments": {"key": "value"}}</tool_call>

Both ask for the same call syntax (the Hermes/Qwen convention most tool templates use), so one
parser reads both. A reply with no `<tool_call>` is the final answer. A call is the first JSON
value after `<tool_call>` (text after it up to `</tool_call>` is ignored); one that is not JSON, names no offered tool, or has non-object arguments is malformed: it goes back to the model
as an error turn and is counted. Tool results come back as `tool` messages on the template path
and as a user message wrapped in `<tool_response>` on the fallback path.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

CALL_OPEN, CALL_CLOSE = "<tool_call>", "</tool_call>"
_DECODER = json.JSONDecoder()
_CALL = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL)

FALLBACK_INSTRUCTIONS = (
    "You can call these tools (JSON Schema of each tool's arguments):\n{tools}\n\n"
    "To call a tool, reply with only\n"
    '<tool_call>{{"name": "TOOL_NAME", "arguments": {{...}}}}</tool_call>\n'
    "and wait for its result in <tool_response>. When you know the answer, reply with the answer "
    "alone, without <tool_call>."
)


@dataclass(frozen=True)
class ToolSpec:
    """One offered tool as the policy sees it."""

    name: str
    description: str
    parameters: dict[str, Any]

    def openai(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class Reply:
    """A policy reply read: its calls, its malformed calls (why each is refused), or its answer."""

    calls: tuple[ToolCall, ...] = ()
    errors: tuple[str, ...] = ()
    answer: str | None = None


@dataclass
class Renderer:
    """Chats -> prompt text for one tokenizer and one set of tools."""

    tokenizer: Any
    tools: Sequence[ToolSpec]
    system_prompt: str | None = None
    uses_template: bool = field(init=False)

    def __post_init__(self) -> None:
        self.uses_template = template_supports_tools(self.tokenizer)

    def system_text(self) -> str | None:
        """The system message (the fallback's tool list included when the template has none)."""
        if self.uses_template:
            return self.system_prompt
        listing = "\n".join(json.dumps(t.openai()["function"], sort_keys=True) for t in self.tools)
        instructions = FALLBACK_INSTRUCTIONS.format(tools=listing)
        return f"{self.system_prompt}\n\n{instructions}" if self.system_prompt else instructions

    def first_messages(self, prompt: str) -> list[dict[str, Any]]:
        system = self.system_text()
        chat: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
        return [*chat, {"role": "user", "content": prompt}]

    def result_message(self, call_name: str, text: str) -> dict[str, Any]:
        if self.uses_template:
            return {"role": "tool", "name": call_name, "content": text}
        return {"role": "user", "content": f"<tool_response>\n{text}\n</tool_response>"}

    def error_message(self, errors: Sequence[str]) -> dict[str, Any]:
        text = (
            "Error: "
            + "; ".join(errors)
            + f'. Write calls as {CALL_OPEN}{{"name": ..., "arguments": {{...}}}}{CALL_CLOSE}.'
        )
        return self.result_message("error", text)

    def render(self, messages: list[dict[str, Any]], *, generation: bool) -> str:
        kwargs: dict[str, Any] = {"tokenize": False, "add_generation_prompt": generation}
        if self.uses_template:
            kwargs["tools"] = [t.openai() for t in self.tools]
        return str(self.tokenizer.apply_chat_template(messages, **kwargs))


def template_supports_tools(tokenizer: Any) -> bool:
    """Whether the tokenizer's chat template reads `tools` (a template that ignores it would
    silently hide the tools from the policy)."""
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, dict):  # named templates: transformers picks "tool_use" when tools are given
        return "tool_use" in template or any("tools" in str(t) for t in template.values())
    return isinstance(template, str) and re.search(r"\btools\b", template) is not None


def parse_reply(text: str, offered: Sequence[str]) -> Reply:
    """The calls in `text`, the reasons its malformed calls are refused, or its final answer."""
    if CALL_OPEN not in text:
        return Reply(answer=text.strip())
    calls: list[ToolCall] = []
    errors: list[str] = []
    for body in _CALL.findall(text):
        try:
            # The first JSON value of the call; what follows it before </tool_call> is ignored
            # (small models often add a stray character after a complete call).
            data, _end = _DECODER.raw_decode(body)
        except ValueError:
            errors.append(f"the tool call {body[:80]!r} is not JSON")
            continue
        if not isinstance(data, dict) or not isinstance(data.get("name"), str):
            errors.append('a tool call is a JSON object with a "name"')
            continue
        arguments = data.get("arguments", {})
        if isinstance(arguments, str):  # some templates write arguments as a JSON string
            try:
                arguments = json.loads(arguments)
            except ValueError:
                pass
        if not isinstance(arguments, dict):
            errors.append(f'the "arguments" of {data["name"]} must be a JSON object')
            continue
        if data["name"] not in offered:
            errors.append(f"no tool {data['name']!r}; the tools are {', '.join(offered) or 'none'}")
            continue
        calls.append(ToolCall(name=data["name"], arguments=arguments))
    return Reply(calls=tuple(calls), errors=tuple(errors))


def cap_bytes(text: str, limit: int) -> str:
    """`text` cut to `limit` UTF-8 bytes (on a character boundary), saying it was cut."""
    data = text.encode("utf-8")
    if len(data) <= limit:
        return text
    note = f"\n[... cut: {len(data)} bytes, {limit} kept]"
    kept = data[: max(0, limit - len(note.encode()))].decode("utf-8", errors="ignore")
    return kept + note
