"""Scenarios generated from an MCP server's tool list by a named OpenRouter model, written to a
JSONL file the user reads and edits before training (issue 47: ART's MCP•RL generates its
scenarios the same way).

The model is shown the offered tools (names, descriptions, argument schemas) and asked for
questions a user would ask that those tools answer, each with its short answer when the tools
determine one. It is asked in requests of `PER_REQUEST` scenarios through OpenRouter's chat
completions with usage accounting on (the smoke tests' gateway does the same), each request's
cost the reported `usage.cost`, else its tokens at the model's listed price. Before each request
the spend so far plus the request's upper bound (its prompt at two characters a token and its
`max_tokens` at the completion price) must stay within the cap: the work stops before it could
pass it, and what was generated so far is written.

Lines the model writes that are not a scenario (no prompt, a prompt already in the task's
scenarios or given twice) are dropped and counted. The file is written whole or not at all and
never replaces one.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from mcp_rl.atomic import write_text_atomic
from mcp_rl.environments.mcp_family.server import open_server
from mcp_rl.environments.mcp_family.taskfile import McpTask
from mcp_rl.environments.mcp_family.tools import ToolSpec

PER_REQUEST = 10
TOKENS_PER_SCENARIO = 120  # completion budget per asked scenario
CHARS_PER_TOKEN_BOUND = 2  # a prompt's tokens are at most its characters / 2 (English runs ~4)
REQUEST_TIMEOUT_S = 60.0
MAX_SCENARIOS = 500
EXAMPLES_SHOWN = 5

INSTRUCTIONS = """\
You write training scenarios for an assistant that can call these tools (JSON Schema of each tool's
arguments):
{tools}
{examples}
Write {count} different questions or requests a user could give this assistant that it can only
answer well by calling the tools above. Vary them: different tools, arguments and difficulty.
Give each its expected final answer, short (a word, a number, a name), when the tools determine
it; otherwise null.

Answer with only a JSON object:
{{"scenarios": [{{"prompt": "...", "answer": "..."}}, ...]}}"""


class GenerationError(RuntimeError):
    """A request that cannot succeed (a refused key, no credits, an unknown model)."""


@dataclass
class Generated:
    path: Path
    written: int = 0
    requests: int = 0
    cost_usd: float = 0.0
    cost_reported: bool = True  # False: some request's cost was computed from the listed price
    dropped: int = 0
    stopped_by_cap: bool = False
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0


def request_bounds(prompt_text: str, count: int) -> tuple[int, int]:
    """(prompt tokens at most, completion tokens asked) of one request for `count` scenarios."""
    return math.ceil(len(prompt_text) / CHARS_PER_TOKEN_BOUND), TOKENS_PER_SCENARIO * count


def requests_for(count: int) -> list[int]:
    """How many scenarios each request asks for."""
    full, rest = divmod(count, PER_REQUEST)
    return [PER_REQUEST] * full + ([rest] if rest else [])


async def offered_tools(task: McpTask, env: Mapping[str, str] | None = None) -> list[ToolSpec]:
    """The tools the task offers the policy (a server session, started and ended here)."""
    async with open_server(task, env) as server:
        return list(server.tools)


def prompt_for(task: McpTask, tools: list[ToolSpec], count: int) -> str:
    listing = "\n".join(json.dumps(t.openai()["function"], sort_keys=True) for t in tools)
    shown = [s for s in (*task.train, *task.held_out)][:EXAMPLES_SHOWN]
    examples = (
        "\nScenarios already written (write new ones like them, never the same):\n"
        + "\n".join(json.dumps({"prompt": s.prompt, "answer": s.answer}) for s in shown)
        + "\n"
        if shown
        else ""
    )
    return INSTRUCTIONS.format(tools=listing, examples=examples, count=count)


def parse_scenarios(text: str) -> tuple[list[dict[str, Any]], int]:
    """The scenarios in a model's answer ({"scenarios": [...]}, a bare list, or one object a
    line; a ```json fence is ignored) and how many entries were not scenarios."""
    body = text.strip()
    if body.startswith("```"):
        body = body.split("\n", 1)[1] if "\n" in body else ""
        body = body.rsplit("```", 1)[0]
    entries: list[Any]
    try:
        data = json.loads(body)
        entries = data.get("scenarios", []) if isinstance(data, dict) else data if isinstance(data, list) else []
        if not isinstance(entries, list):
            entries = []
    except ValueError:
        entries = []
        for line in body.splitlines():
            try:
                entries.append(json.loads(line))
            except ValueError:
                if line.strip():
                    entries.append(None)
    out: list[dict[str, Any]] = []
    bad = 0
    for entry in entries:
        prompt = entry.get("prompt") if isinstance(entry, dict) else None
        if not isinstance(prompt, str) or not prompt.strip():
            bad += 1
            continue
        answer = entry.get("answer")
        row: dict[str, Any] = {"prompt": prompt.strip()}
        if answer is not None and not isinstance(answer, (dict, list)):
            row["answer"] = str(answer).strip()
        out.append(row)
    return out, bad


@dataclass(frozen=True)
class Pricing:
    prompt_usd: float  # per token
    completion_usd: float

    def usd(self, prompt_tokens: int, completion_tokens: int) -> float:
        return prompt_tokens * self.prompt_usd + completion_tokens * self.completion_usd


def generate(
    task: McpTask,
    tools: list[ToolSpec],
    count: int,
    out_path: Path,
    *,
    model: str,
    base_url: str,
    api_key: str,
    pricing: Pricing,
    cap_usd: float | None,
    client: httpx.Client | None = None,
    cancelled: Callable[[], bool] = lambda: False,
) -> Generated:
    """Ask `model` for `count` scenarios and write the new ones to `out_path` (never replaced)."""
    if out_path.exists():
        raise FileExistsError(f"{out_path} exists")
    began = time.monotonic()
    result = Generated(path=out_path)
    known = {s.prompt for s in (*task.train, *task.held_out)}
    kept: list[dict[str, Any]] = []
    http = client or httpx.Client(timeout=httpx.Timeout(REQUEST_TIMEOUT_S, connect=10.0))
    url = f"{base_url.rstrip('/')}/chat/completions"
    headers = {"Authorization": f"Bearer {api_key}", "Content-Type": "application/json"}
    for asked in requests_for(count):
        if cancelled() or len(kept) >= count:
            break
        prompt = prompt_for(task, tools, asked)
        prompt_bound, max_tokens = request_bounds(prompt, asked)
        if cap_usd is not None and result.cost_usd + pricing.usd(prompt_bound, max_tokens) > cap_usd:
            result.stopped_by_cap = True
            break
        body = {
            "model": model,
            "messages": [{"role": "user", "content": prompt}],
            "max_tokens": max_tokens,
            "temperature": 1.0,
            "usage": {"include": True},  # OpenRouter reports the request's cost
        }
        try:
            response = http.post(url, content=json.dumps(body).encode(), headers=headers)
        except httpx.HTTPError as exc:
            result.problems.append(f"request {result.requests + 1}: {type(exc).__name__}: {exc}")
            continue
        result.requests += 1
        try:
            data = response.json()
        except ValueError:
            data = {}
        if response.status_code in (401, 402, 403) or (
            response.status_code == 400 and "model" in json.dumps(data.get("error", "")).lower()
        ):
            message = (data.get("error") or {}).get("message", "") if isinstance(data, dict) else ""
            raise GenerationError(f"OpenRouter answered {response.status_code}: {message}")
        if response.status_code != 200 or not isinstance(data, dict) or not data.get("choices"):
            result.problems.append(f"request {result.requests}: HTTP {response.status_code} without an answer")
            continue
        result.cost_usd += _cost(data.get("usage"), pricing, result, pricing.usd(prompt_bound, max_tokens))
        message = data["choices"][0].get("message") or {}
        scenarios, bad = parse_scenarios(str(message.get("content") or ""))
        result.dropped += bad
        for scenario in scenarios:
            if scenario["prompt"] in known:
                result.dropped += 1
                continue
            known.add(scenario["prompt"])
            kept.append(scenario)
    kept = kept[:count]
    if kept:
        if out_path.exists():
            raise FileExistsError(f"{out_path} appeared while the scenarios were generated")
        write_text_atomic(out_path, "".join(json.dumps(s, ensure_ascii=False) + "\n" for s in kept))
    result.written = len(kept)
    result.seconds = round(time.monotonic() - began, 2)
    return result


def _cost(usage: Any, pricing: Pricing, result: Generated, bound: float) -> float:
    """The request's cost: OpenRouter's reported one, else its tokens at the listed price, else
    (no usage at all) its upper bound: never counted as free."""
    reported = usage.get("cost") if isinstance(usage, dict) else None
    if isinstance(reported, (int, float)) and math.isfinite(reported) and reported >= 0:
        return float(reported)
    result.cost_reported = False
    if not isinstance(usage, dict) or not usage.get("prompt_tokens"):
        return bound
    return pricing.usd(int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0))
