"""Scenarios generated from the server's tool list by an OpenRouter model, at the loopback fake
of OpenRouter (real HTTP, its documented usage accounting): estimated and asked about as paid
work, metered, capped, written to a new JSONL file; and through the real MCP server."""

from __future__ import annotations

import json
import re
from pathlib import Path

import anyio
import pytest
from mcp import Client

from mcp_rl.environments.mcp_family import scenarios as generation
from mcp_rl.environments.mcp_family.taskfile import load, read_scenarios
from tests.conftest import stdio_params
from tests.fakes.fake_openrouter import PRICE_PER_TOKEN_USD, FakeOpenRouter
from tests.kit.mcp import ok
from tests.mcp_family.kit import write_task

MODEL = "openai/gpt-4o-mini"


def responder(model: str, prompt: str, index: int) -> str:
    """As many scenarios as asked, plus an entry that is not one, a repeated prompt and one of the
    task's own prompts (each must be dropped)."""
    asked = int(re.search(r"Write (\d+) different", prompt).group(1))  # type: ignore[union-attr]
    tools = re.findall(r'"name": "(\w+)"', prompt)
    rows = [{"prompt": f"Using {tools[0]}: question {index}.{i}?", "answer": f"A{index}.{i}"} for i in range(asked)]
    rows += [{"answer": "no prompt"}, rows[0], {"prompt": "What is the capital of Peru?", "answer": "Lima"}]
    return "```json\n" + json.dumps({"scenarios": rows}) + "\n```"


@pytest.mark.parametrize(
    ("text", "prompts", "bad"),
    [
        ('{"scenarios": [{"prompt": "a", "answer": 3}, {"prompt": ""}]}', ["a"], 1),
        ('[{"prompt": "a"}, "b"]', ["a"], 1),
        ('{"prompt": "a", "answer": "x"}\nnot json\n{"prompt": "b"}', ["a", "b"], 1),
        ("I cannot help with that.", [], 1),
    ],
)
def test_a_models_answer_is_read_leniently_and_non_scenarios_counted(text: str, prompts: list[str], bad: int) -> None:
    found, dropped = generation.parse_scenarios(text)
    assert [s["prompt"] for s in found] == prompts and dropped == bad


def _tools(task_path: Path) -> list:
    return anyio.run(generation.offered_tools, load(task_path))


def test_generation_writes_new_scenarios_metered_by_the_reported_cost(tmp_path: Path) -> None:
    task_path = write_task(tmp_path)
    task = load(task_path)
    tools = _tools(task_path)
    assert "capital" in [t.name for t in tools] and "wipe" not in [t.name for t in tools]
    out = tmp_path / "generated.jsonl"
    with FakeOpenRouter(responder=responder, api_key="sk-or-test", reported_cost_factor=3.0) as fake:
        done = generation.generate(
            task,
            tools,
            13,
            out,
            model=MODEL,
            base_url=fake.base_url,
            api_key="sk-or-test",
            pricing=generation.Pricing(PRICE_PER_TOKEN_USD, PRICE_PER_TOKEN_USD),
            cap_usd=1.0,
        )
        bodies = [r.body for r in fake.completions_for(MODEL)]
    assert done.written == 13 and done.requests == 2 and not done.stopped_by_cap
    assert done.dropped == 2 * 3  # per request: no prompt, a repeat, one of the task's own
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(lines) == 13 and all(line["prompt"].startswith("Using ") for line in lines)
    assert len({line["prompt"] for line in lines}) == 13
    assert all(b["usage"] == {"include": True} and "wipe" not in b["messages"][0]["content"] for b in bodies)
    # The cost is OpenRouter's reported one (3x the listed price here), not recomputed.
    tokens = sum(len(b["messages"][0]["content"]) for b in bodies)  # only a lower bound of the fake's count
    assert done.cost_reported and done.cost_usd > 3 * PRICE_PER_TOKEN_USD * tokens / 10
    assert read_scenarios(out)  # the file is a scenarios file the task can point at


def test_the_cap_stops_before_it_could_be_passed_and_a_file_is_never_replaced(tmp_path: Path) -> None:
    task = load(write_task(tmp_path))
    tools = _tools(task.path)
    out = tmp_path / "generated.jsonl"
    prompt_bound, max_tokens = generation.request_bounds(generation.prompt_for(task, tools, 10), 10)
    one_request = (prompt_bound + max_tokens) * PRICE_PER_TOKEN_USD
    with FakeOpenRouter(responder=responder) as fake:
        kwargs = {
            "model": MODEL,
            "base_url": fake.base_url,
            "api_key": "k",
            "pricing": generation.Pricing(PRICE_PER_TOKEN_USD, PRICE_PER_TOKEN_USD),
        }
        cap = 1.5 * one_request
        done = generation.generate(task, tools, 50, out, cap_usd=cap, **kwargs)  # type: ignore[arg-type]
        # Stopped only when the next request's upper bound could pass the cap, never past it.
        assert done.stopped_by_cap and 1 <= done.requests < 5
        assert done.cost_usd <= cap < done.cost_usd + one_request
        assert done.written == 10 * done.requests
        with pytest.raises(FileExistsError):
            generation.generate(task, tools, 5, out, cap_usd=1.0, **kwargs)  # type: ignore[arg-type]
    with FakeOpenRouter(behaviours={"broke/model": "nocredits"}) as fake:
        with pytest.raises(generation.GenerationError, match="402"):
            generation.generate(
                task,
                tools,
                5,
                tmp_path / "other.jsonl",
                model="broke/model",
                base_url=fake.base_url,
                api_key="k",
                pricing=generation.Pricing(1e-6, 1e-6),
                cap_usd=1.0,
            )
    assert not (tmp_path / "other.jsonl").exists()


@pytest.mark.anyio
async def test_the_tool_asks_as_paid_work_does_then_writes_the_file(home: Path, tmp_path: Path) -> None:
    task_path = write_task(tmp_path)
    args = {"task_file": str(task_path), "model": MODEL, "count": 12}
    with FakeOpenRouter(responder=responder, api_key="sk-or-test") as fake:
        params = stdio_params(
            home, OPENROUTER_API_KEY="sk-or-test", OPENROUTER_BASE_URL=fake.base_url, MCP_RL_CONFIRM_ABOVE_USD="0"
        )
        async with Client(params) as client:
            refused = await ok(client, "rl_generate_mcp_scenarios", args)
            assert refused["status"] == "refused" and "max_cost_usd" in refused["message"], refused
            assert refused["estimated_cost"]["run_usd"]["high"] > 0 and "capital" in refused["tools"]
            assert fake.completions_for(MODEL) == []  # nothing was sent before the yes
            written = await ok(client, "rl_generate_mcp_scenarios", {**args, "max_cost_usd": 1.0})
            assert written["status"] == "written" and written["written"] == 12, written
            assert written["cost_usd"] > 0 and written["requests"] == 2
            again = await client.call_tool("rl_generate_mcp_scenarios", {**args, "max_cost_usd": 1.0})
            assert again.is_error and "exists" in str(again.content)
            unknown = await client.call_tool(
                "rl_generate_mcp_scenarios", {**args, "model": "no/such-model", "output": str(tmp_path / "other.jsonl")}
            )
            assert unknown.is_error and "not a model OpenRouter lists" in str(unknown.content)
    path = Path(written["path"])
    assert path.parent == tmp_path and len(path.read_text().splitlines()) == 12
