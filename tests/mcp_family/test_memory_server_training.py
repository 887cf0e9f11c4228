"""Issue 47's end-to-end check: a real MCP server nobody here wrote (npm
`@modelcontextprotocol/server-memory`, pinned, installed by the test's setup) trained against
locally for 2 steps through a stdio MCP client, its tools called from the policy's episodes, the
held-out scenarios evaluated before and after, and no server process left afterwards.

The memory server keeps a knowledge graph in MEMORY_FILE_PATH (the one variable the task lets
through): seeded with people and their jobs; the scenarios ask for a person's job, and only the
read tools are allowed, so every episode sees the same graph.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import psutil
import pytest
from mcp import Client

from mcp_rl.locking import exclusive_lock
from tests.conftest import stdio_params
from tests.kit.mcp import ok, run_to_end

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

PACKAGE, VERSION = "@modelcontextprotocol/server-memory", "2026.8.31"
RUN_DEADLINE_S = 600.0
PEOPLE = {
    "Alice Novak": "pilot", "Bruno Silva": "baker", "Chen Wei": "nurse", "Dara Okafor": "lawyer",
    "Emil Berg": "farmer", "Fatima Zahra": "dentist", "Goran Petrov": "plumber", "Hana Sato": "chemist",
    "Ivan Horvat": "teacher", "Jana Dvorak": "architect", "Kofi Mensah": "journalist", "Lena Fischer": "surgeon",
}  # fmt: skip
SHORT = {"total_steps": 2, "group_size": 4, "batch_size": 8, "eval_scenarios": 4, "max_token_length": 1536}


def install_memory_server() -> Path:
    """The pinned server in a cache outside the checkout (once per version; concurrent sessions
    wait for the one installing). Returns its entry point."""
    cache = Path.home() / ".cache" / "mcp-rl-ci" / "mcp-servers" / f"server-memory-{VERSION}"
    entry = cache / "node_modules" / PACKAGE / "dist" / "index.js"
    cache.parent.mkdir(parents=True, exist_ok=True)
    with exclusive_lock(cache.parent / f"server-memory-{VERSION}.lock", timeout_s=300):
        if not (cache / ".installed").exists():
            cache.mkdir(exist_ok=True)
            argv = ["npm", "install", "--prefix", str(cache), "--no-audit", "--no-fund", "--loglevel=error"]
            subprocess.run([*argv, f"{PACKAGE}@{VERSION}"], check=True, timeout=280)
            (cache / ".installed").touch()
    assert entry.is_file(), entry
    return entry


def write_task(folder: Path, entry: Path) -> tuple[Path, Path]:
    memory = folder / "memory.jsonl"
    memory.write_text(
        "".join(
            json.dumps({"type": "entity", "name": n, "entityType": "person", "observations": [f"works as a {job}"]})
            + "\n"
            for n, job in PEOPLE.items()
        )
    )
    (folder / "scenarios.jsonl").write_text(
        "".join(
            json.dumps({"prompt": f"What is {n}'s job? Look it up with the tools. Answer with one word.", "answer": j})
            + "\n"
            for n, j in PEOPLE.items()
        )
    )
    task = folder / "jobs.mcp.yaml"
    task.write_text(
        "name: jobs\n"
        f"server:\n  command: node\n  args: [{json.dumps(str(entry))}]\n  env_vars: [MEMORY_FILE_PATH]\n"
        "scenarios: scenarios.jsonl\nheld_out_fraction: 0.4\nreward: {kind: normalised}\n"
        "tools: [search_nodes, open_nodes]\n"
        # The 135M model never writes a call by itself (measured: 0 of 24 episodes): its first
        # turn starts with one, and it writes the query.
        'first_turn_prefill: \'<tool_call>{"name": "search_nodes", "arguments": {"query": "\'\n'
        "limits: {max_turns: 3, max_tool_calls: 3, max_tokens_per_turn: 40, output_bytes: 400, call_timeout_s: 10}\n"
    )
    return task, memory


def servers_of(entry: Path) -> list[psutil.Process]:
    found = []
    for process in psutil.process_iter(["cmdline"]):
        if str(entry) in " ".join(process.info["cmdline"] or []):
            found.append(process)
    return found


async def test_a_model_trains_against_the_memory_server(home: Path, tmp_path: Path) -> None:
    entry = install_memory_server()
    task_file, memory = write_task(tmp_path, entry)
    async with Client(stdio_params(home, MEMORY_FILE_PATH=str(memory))) as client:
        listed = await ok(client, "rl_list_environments", {"filter": "mcp"})
        assert "mcp" in [e["name"] for e in listed["environments"]], listed
        selected = await ok(client, "rl_select_environment", {"name": "mcp"})
        assert selected["class_name"] == "McpEnv"
        await ok(client, "rl_edit_config", {"field": "task_file", "value": str(task_file)})
        for field, value in SHORT.items():
            await ok(client, "rl_edit_config", {"field": field, "value": value})
        started = await ok(client, "rl_start_training")
        run_id = started["run_id"]
        status = await run_to_end(client, run_id, RUN_DEADLINE_S)
        assert status["status"] == "completed", status
        assert status["metrics"]["step"] == 2
        results = await ok(client, "rl_get_results", {"run_id": run_id})
    run_dir = Path(results["run_dir"])
    held_out = results["held_out"]
    assert held_out is not None and (held_out["n"], held_out["base_step"], held_out["step"]) == (4, 0, 2)
    env_lines = [json.loads(line) for line in (run_dir / "env_metrics.jsonl").read_text().splitlines()]
    mcp = [m for m in env_lines if "mcp/episodes" in m]
    assert mcp, env_lines
    assert sum(m["mcp/episodes"] for m in mcp) >= 16  # 2 steps x 2 groups x 4 episodes
    assert all(m["mcp/dropped_episodes"] == 0 for m in mcp)
    calls = sum(m["mcp/tool_calls_per_episode"] * m["mcp/episodes"] for m in mcp)
    executed = sum(m["mcp/executed_calls_per_episode"] * m["mcp/episodes"] for m in mcp)
    print(f"tool calls in training episodes: {calls:.0f}, {executed:.0f} executed; held-out: {held_out}")
    assert calls >= 16  # every episode's first turn is a call (prefilled)
    assert executed > 0  # ... and the server answered some of them
    assert all(0.0 <= m["mcp/tool_call_validity"] <= 1.0 for m in mcp)
    assert servers_of(entry) == []  # every episode's server process ended
