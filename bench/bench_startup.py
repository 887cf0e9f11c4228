"""Start-up and environment-tool latency over real stdio (issue 2 and 28 targets).

Prints, from the same run, with the machine named:
  * process start -> `initialize` answered and -> tools/list answered, mcp-rl vs a bare MCPServer
    with one tool (the floor: importing the mcp SDK alone takes most of a second here), warm
    (bytecode cached, mcp-rl's kept tool schemas) and cold (a fresh interpreter with an empty
    bytecode cache, PYTHONPYCACHEPREFIX, and a fresh state home, so nothing kept is reused: a
    first start after install, or after an upgrade); target: warm tools/list within 1.2x of the floor;
  * rl_list_environments over 200 environment files, warm (target < 200 ms);
  * a cached rl_select_environment (target < 100 ms).

With `--against DIR` (another checkout of mcp-rl, e.g. `git worktree add /tmp/before <commit>`),
that code is measured the same way in the same run (interleaved, same interpreter and packages,
run with PYTHONPATH=DIR), so a change is judged against the code before it on the same load.

Each start also prints the server's CPU time up to the answer (all its threads, from /proc):
on a busy machine the wall times stretch with the others' load, the CPU times much less.

Run: python bench/bench_startup.py [--rounds 7] [--against DIR]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio
import psutil
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

HERE = Path(__file__).resolve().parent.parent


def params(args: list[str], env: dict[str, str], code: Path | None = None) -> StdioServerParameters:
    full = {"PATH": os.environ.get("PATH", ""), **env}
    if code is not None:  # this checkout's mcp_rl first on the path, whatever is installed
        full["PYTHONPATH"] = str(code)
    return StdioServerParameters(command=sys.executable, args=args, env=full, cwd=str(code or HERE))


def server_cpu_s() -> float:
    """CPU time the server (our only child) has used so far, all its threads: a figure the other
    processes of a busy machine do not stretch, unlike the wall time (Linux: /proc schedstat)."""
    children = psutil.Process().children()
    if len(children) != 1:
        return float("nan")
    total_ns = 0
    for task in Path(f"/proc/{children[0].pid}/task").glob("*/schedstat"):
        try:
            total_ns += int(task.read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return float("nan")
    return total_ns / 1e9


async def time_to_tools_list(p: StdioServerParameters) -> tuple[float, float, float]:
    """(wall seconds to the initialize answer, to the tools/list answer, server CPU seconds to it)."""
    start = time.perf_counter()
    async with Client(p, mode="legacy") as client:  # entered once `initialize` is answered
        initialized = time.perf_counter() - start
        await client.list_tools()
        return initialized, time.perf_counter() - start, server_cpu_s()


def cold(p: StdioServerParameters, scratch: Path, env_key: str | None = None) -> StdioServerParameters:
    """`p` with an empty bytecode cache that is not written back (every module compiled from source)
    and, for mcp-rl, a state home of its own (no kept tool schemas)."""
    folder = Path(tempfile.mkdtemp(dir=scratch))
    env = {**(p.env or {}), "PYTHONPYCACHEPREFIX": str(folder / "pycache"), "PYTHONDONTWRITEBYTECODE": "1"}
    if env_key is not None:
        env[env_key] = str(folder / "home")
    return p.model_copy(update={"env": env})


def machine() -> str:
    model = "unknown CPU"
    try:
        model = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    memory_gib = psutil.virtual_memory().total / 2**30
    return f"{platform.node()}: {model}, {os.cpu_count()} CPUs, {memory_gib:.0f} GiB, {platform.system()} {platform.release()}, Python {platform.python_version()}"


async def timed_calls(client: Client, name: str, args: dict, n: int) -> list[float]:
    times = []
    for _ in range(n):
        start = time.perf_counter()
        result = await client.call_tool(name, args)
        times.append(time.perf_counter() - start)
        if result.is_error:
            raise SystemExit(f"{name} failed: {result.content[0].text}")
    return times


async def warm_figures(p: StdioServerParameters) -> dict[str, list[float]]:
    async with Client(p) as client:
        return {
            "list_cold": await timed_calls(client, "rl_list_environments", {}, 1),
            "list_warm": await timed_calls(client, "rl_list_environments", {}, 10),
            "select_first": await timed_calls(client, "rl_select_environment", {"name": "generated_7"}, 1),
            "select_cached": await timed_calls(client, "rl_select_environment", {"name": "generated_7"}, 10),
        }


def ms(xs: list[float]) -> float:
    return statistics.median(xs) * 1000


async def main(rounds: int, against: Path | None) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        bare_file = tmp_path / "bare.py"
        bare_file.write_text(BARE_SERVER)
        envs = tmp_path / "envs"
        envs.mkdir()
        for i in range(200):
            (envs / f"env_{i:03d}.py").write_text(ENV_TEMPLATE.format(i=i))
        codes: dict[str, Path] = {"mcp-rl": HERE}
        if against is not None:
            codes["against"] = against
        envs_of = {
            label: {"MCP_RL_HOME": str(tmp_path / f"home-{label}"), "MCP_RL_ENV_PATHS": str(envs)} for label in codes
        }
        serve = ["-m", "mcp_rl", "serve"]
        starts: dict[str, list[float]] = {"bare": [], **{label: [] for label in codes}}
        inits: dict[str, list[float]] = {"bare": [], **{label: [] for label in codes}}
        cpu: dict[str, list[float]] = {"bare": [], **{label: [] for label in codes}}
        cold_starts: dict[str, list[float]] = {"bare": [], **{label: [] for label in codes}}
        cold_inits: dict[str, list[float]] = {"bare": [], **{label: [] for label in codes}}
        scratch = tmp_path / "cold"
        scratch.mkdir()
        for _ in range(rounds):  # interleaved, so all see the same machine load
            for label, p in [
                ("bare", params([str(bare_file)], envs_of["mcp-rl"])),
                *((label, params(serve, envs_of[label], code)) for label, code in codes.items()),
            ]:
                initialized, wall, used = await time_to_tools_list(p)
                inits[label].append(initialized)
                starts[label].append(wall)
                cpu[label].append(used)
                initialized, wall, _ = await time_to_tools_list(
                    cold(p, scratch, None if label == "bare" else "MCP_RL_HOME")
                )
                cold_inits[label].append(initialized)
                cold_starts[label].append(wall)
        warm: dict[str, dict[str, list[float]]] = {}
        for _ in range(2):  # alternated too; the figures are the medians of both sessions' calls
            for label, code in codes.items():
                for key, xs in (await warm_figures(params(serve, envs_of[label], code))).items():
                    warm.setdefault(label, {}).setdefault(key, []).extend(xs)
    bare, bare_cpu = ms(starts["bare"]), ms(cpu["bare"])
    print(f"machine: {machine()}")
    print(
        f"bare MCPServer: warm initialize {ms(inits['bare']):.0f} ms, tools/list {bare:.0f} ms; "
        f"cold initialize {ms(cold_inits['bare']):.0f} ms, tools/list {ms(cold_starts['bare']):.0f} ms"
    )
    print(
        f"start -> tools/list, bare MCPServer (floor): median {bare:.0f} ms over {rounds} "
        f"(server CPU {bare_cpu:.0f} ms); load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"
    )
    ok = True
    for label, code in codes.items():
        ours, w = ms(starts[label]), warm[label]
        ratio = ours / bare
        name = "mcp-rl serve" if label == "mcp-rl" else f"against {code}"
        print(f"\n[{name}]")
        print(
            f"warm: start -> initialize answered median {ms(inits[label]):.0f} ms, -> tools/list {ours:.0f} ms "
            f"over {rounds}; tools/list ratio to bare {ratio:.2f}x (target <= 1.2x)"
        )
        print(
            f"cold (no bytecode cache, fresh home): start -> initialize answered median {ms(cold_inits[label]):.0f} ms, "
            f"-> tools/list {ms(cold_starts[label]):.0f} ms ({ms(cold_starts[label]) / ms(cold_starts['bare']):.2f}x bare's cold)"
        )
        print(
            f"  server CPU to the answer: median {ms(cpu[label]):.0f} ms, {ms(cpu[label]) / bare_cpu:.2f}x bare's "
            "(the same ratio without the other processes' share of a busy machine)"
        )
        print(
            f"rl_list_environments, 200 files: cold {ms(w['list_cold']):.0f} ms, "
            f"warm median {ms(w['list_warm']):.1f} ms (target < 200 ms)"
        )
        print(
            f"rl_select_environment: first {ms(w['select_first']):.0f} ms, "
            f"cached median {ms(w['select_cached']):.1f} ms (target < 100 ms)"
        )
        if label == "mcp-rl":
            ok = ratio <= 1.2 and ms(w["list_warm"]) < 200 and ms(w["select_cached"]) < 100
    print("\nPASS" if ok else "\nFAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--against", type=Path, help="another mcp-rl checkout, measured in the same run")
    a = parser.parse_args()
    raise SystemExit(anyio.run(main, a.rounds, a.against))
