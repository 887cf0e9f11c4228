"""Tool rendering (the template's tool support, else the fallback) and call parsing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mcp_rl.environments.mcp_family.tools import (
    Renderer,
    ToolCall,
    ToolSpec,
    cap_bytes,
    parse_reply,
    template_supports_tools,
)
from tests.mcp_family.kit import SMOL_TEMPLATE, TOOLS_TEMPLATE, CharTokenizer, call

TOOLS = [
    ToolSpec(
        "capital", "The capital city of a country.", {"type": "object", "properties": {"country": {"type": "string"}}}
    ),
    ToolSpec("add", "Adds two numbers.", {"type": "object", "properties": {"a": {"type": "number"}}}),
]
OFFERED = [t.name for t in TOOLS]


def test_a_reply_without_a_call_is_the_final_answer() -> None:
    assert parse_reply("  Paris \n", OFFERED).answer == "Paris"
    assert parse_reply("", OFFERED).answer == ""


def test_calls_are_read_in_order_with_their_arguments() -> None:
    text = "Let me look.\n" + call("capital", country="Peru") + "\n" + call("add", a=1)
    reply = parse_reply(text, OFFERED)
    assert reply.answer is None and not reply.errors
    assert reply.calls == (ToolCall("capital", {"country": "Peru"}), ToolCall("add", {"a": 1}))
    # Arguments given as a JSON string (as some templates write them), and a call cut by max_tokens.
    stringy = '<tool_call>{"name": "add", "arguments": "{\\"a\\": 2}"}</tool_call>'
    assert parse_reply(stringy, OFFERED).calls == (ToolCall("add", {"a": 2}),)
    unclosed = '<tool_call>{"name": "add", "arguments": {"a": 3}}'
    assert parse_reply(unclosed, OFFERED).calls == (ToolCall("add", {"a": 3}),)
    trailing = '<tool_call>{"name": "add", "arguments": {"a": 4}}.</tool_call> then more'
    assert parse_reply(trailing, OFFERED).calls == (ToolCall("add", {"a": 4}),)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("<tool_call>{name: capital}</tool_call>", "is not JSON"),
        ('<tool_call>["capital"]</tool_call>', 'with a "name"'),
        ('<tool_call>{"name": "capital", "arguments": [1]}</tool_call>', "must be a JSON object"),
        ('<tool_call>{"name": "wipe", "arguments": {}}</tool_call>', "no tool 'wipe'"),
        ('<tool_call>{"name": "capital", "arguments": {"country": "Peru"}</tool_call>', "is not JSON"),
    ],
)
def test_a_malformed_call_is_an_error_not_an_answer(text: str, says: str) -> None:
    reply = parse_reply(text, OFFERED)
    assert reply.answer is None and not reply.calls
    assert len(reply.errors) == 1 and says in reply.errors[0]


def test_the_fallback_lists_the_tools_in_the_system_message() -> None:
    tokenizer = CharTokenizer(SMOL_TEMPLATE)
    assert not template_supports_tools(tokenizer)
    renderer = Renderer(tokenizer, TOOLS, system_prompt="Answer with one word.")
    assert not renderer.uses_template
    text = renderer.render(renderer.first_messages("Capital of Peru?"), generation=True)
    assert text.startswith("<|im_start|>system\nAnswer with one word.")
    for tool in TOOLS:
        assert json.dumps(tool.openai()["function"], sort_keys=True) in text
    assert '<tool_call>{"name": "TOOL_NAME", "arguments": {...}}</tool_call>' in text
    assert text.endswith("<|im_start|>user\nCapital of Peru?<|im_end|>\n<|im_start|>assistant\n")
    # Results come back as a user turn (the template knows no tool role).
    assert renderer.result_message("capital", "Lima") == {
        "role": "user",
        "content": "<tool_response>\nLima\n</tool_response>",
    }


def test_a_template_with_tool_support_gets_the_tools_itself() -> None:
    tokenizer = CharTokenizer(TOOLS_TEMPLATE)
    renderer = Renderer(tokenizer, TOOLS, system_prompt=None)
    assert renderer.uses_template
    messages = renderer.first_messages("Capital of Peru?")
    assert messages == [{"role": "user", "content": "Capital of Peru?"}]  # no fallback text
    text = renderer.render(messages, generation=True)
    assert text.startswith("<|im_start|>system\nTOOLS:")
    assert json.dumps(TOOLS[0].openai(), sort_keys=True) in text
    assert "TOOL_NAME" not in text
    assert renderer.result_message("capital", "Lima") == {"role": "tool", "name": "capital", "content": "Lima"}


def test_the_template_path_through_transformers(tiny_tokenizer: str) -> None:
    # transformers' own apply_chat_template(tools=...) on a real tokenizer object.
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_tokenizer)
    assert not template_supports_tools(tokenizer)  # its template ignores tools
    tokenizer.chat_template = TOOLS_TEMPLATE.replace("t | tojson", "t.function.name")
    renderer = Renderer(tokenizer, TOOLS)
    assert renderer.uses_template
    text = renderer.render(renderer.first_messages("hi"), generation=True)
    assert "TOOLS:" in text and text.index("capital") < text.index("add") < text.index("<|im_start|>user")


def test_the_default_models_template_takes_the_fallback(model_dir: Path) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    renderer = Renderer(tokenizer, TOOLS)
    assert not renderer.uses_template
    text = renderer.render(renderer.first_messages("Capital of Peru?"), generation=True)
    assert "<tool_call>" in text and '"name": "capital"' in text


def test_results_are_capped_in_bytes_on_a_character_boundary() -> None:
    assert cap_bytes("short", 100) == "short"
    long = "é" * 500  # two bytes a character
    capped = cap_bytes(long, 200)
    assert len(capped.encode("utf-8")) <= 200
    assert capped.startswith("éé") and "1000 bytes, 200 kept" in capped
