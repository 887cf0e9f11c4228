"""Start-up and environment-tool latency over real stdio (issue 2 targets).

Prints, from the same run:
  * process start -> tools/list answered, mcp-rl vs a bare MCPServer with one tool (the floor:
    importing the mcp SDK alone takes about a second here); target: within 1.2x of the floor;
  * rl_list_environments over 200 environment files, warm (target < 200 ms);
  * a cached rl_select_environment (target < 100 ms).

Run: python bench/bench_startup.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio
from mcp import Client, StdioServerParameters

BARE_SERVER = """
from mcp.server import MCPServer
mcp = MCPServer("bare")
@mcp.tool()
def ping() -> str:
    return "pong"
mcp.run()
"""

ENV_TEMPLATE = '''"""Generated environment {i}."""
from atroposlib.envs.base import BaseEnv


class Env{i}(BaseEnv):
    """Environment number {i}."""

    name = "generated_{i}"
'''


def params(args: list[str], env: dict[str, str]) -> StdioServerParameters:
    full = {"PATH": os.environ.get("PATH", ""), **env}
    return StdioServerParameters(command=sys.executable, args=args, env=full)


async def time_to_tools_list(p: StdioServerParameters) -> float:
    start = time.perf_counter()
    async with Client(p, mode="legacy") as client:
        await client.list_tools()
        return time.perf_counter() - start


async def timed_calls(client: Client, name: str, args: dict, n: int) -> list[float]:
    times = []
    for _ in range(n):
        start = time.perf_counter()
        result = await client.call_tool(name, args)
        times.append(time.perf_counter() - start)
        if result.is_error:
            raise SystemExit(f"{name} failed: {result.content[0].text}")
    return times


async def main(rounds: int) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        bare_file = tmp_path / "bare.py"
        bare_file.write_text(BARE_SERVER)
        envs = tmp_path / "envs"
        envs.mkdir()
        for i in range(200):
            (envs / f"env_{i:03d}.py").write_text(ENV_TEMPLATE.format(i=i))
        env = {"MCP_RL_HOME": str(tmp_path / "home"), "MCP_RL_ENV_PATHS": str(envs)}
        ours, bare = [], []
        for _ in range(rounds):  # interleaved, so both see the same machine load
            bare.append(await time_to_tools_list(params([str(bare_file)], env)))
            ours.append(await time_to_tools_list(params(["-m", "mcp_rl", "serve"], env)))
        ratio = statistics.median(ours) / statistics.median(bare)
        async with Client(params(["-m", "mcp_rl", "serve"], env)) as client:
            cold = await timed_calls(client, "rl_list_environments", {}, 1)
            warm = await timed_calls(client, "rl_list_environments", {}, 10)
            first_select = await timed_calls(client, "rl_select_environment", {"name": "generated_7"}, 1)
            cached_select = await timed_calls(client, "rl_select_environment", {"name": "generated_7"}, 10)
    ms = lambda xs: statistics.median(xs) * 1000  # noqa: E731
    print(f"start -> tools/list, bare MCPServer (floor): median {ms(bare):.0f} ms over {rounds}")
    print(f"start -> tools/list, mcp-rl serve:           median {ms(ours):.0f} ms over {rounds}")
    print(f"ratio mcp-rl / bare: {ratio:.2f}x (target <= 1.2x)")
    print(f"rl_list_environments, 200 files: cold {ms(cold):.0f} ms, warm median {ms(warm):.1f} ms (target < 200 ms)")
    print(
        f"rl_select_environment: first {ms(first_select):.0f} ms, cached median {ms(cached_select):.1f} ms (target < 100 ms)"
    )
    ok = ratio <= 1.2 and ms(warm) < 200 and ms(cached_select) < 100
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    raise SystemExit(anyio.run(main, parser.parse_args().rounds))
