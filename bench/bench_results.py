"""rl_get_results latency and output size on long runs (issue 6), through an in-memory client.

For synthetic runs of N steps (the shared metrics.jsonl format, with environment metrics) prints:
  * the first call (draws the PNG; the first call of a process also imports matplotlib),
  * warm calls (PNG cached until a new step lands): median and max,
  * a call right after a new step (PNG redrawn),
  * the structured JSON size and history length (bounded whatever N is),
  * one RunWatch poll over all registered runs (the notification watcher's cost per second).

Run: python bench/bench_results.py [--steps 2000 20000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio
from mcp import Client

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mcp_rl.server.app import build_server
from mcp_rl.settings import Settings
from mcp_rl.supervisor.changes import RunWatch
from tests.kit.runs import write_run


async def bench(steps_list: list[int], rounds: int) -> None:
    home = Path(tempfile.mkdtemp(prefix="bench-results-"))
    settings = Settings.from_env({"MCP_RL_HOME": str(home), "WANDB_MODE": "disabled"})
    settings.ensure_home()
    for steps in steps_list:
        write_run(settings, f"r{steps}", steps, env_metrics=True)
    async with Client(build_server(settings)) as client:
        for steps in steps_list:
            run_id = f"r{steps}"
            t = time.perf_counter()
            result = await client.call_tool("rl_get_results", {"run_id": run_id})
            first = time.perf_counter() - t
            assert not result.is_error, result.content
            warm = []
            for _ in range(rounds):
                t = time.perf_counter()
                await client.call_tool("rl_get_results", {"run_id": run_id})
                warm.append(time.perf_counter() - t)
            with open(settings.runs_dir / run_id / "metrics.jsonl", "a", encoding="utf-8") as fh:  # noqa: ASYNC230 (one line, in a bench)
                fh.write(json.dumps({"step": steps + 1, "reward/mean": 0.5, "train/loss": 0.1}) + "\n")
            t = time.perf_counter()
            await client.call_tool("rl_get_results", {"run_id": run_id})
            after_step = time.perf_counter() - t
            data = result.structured_content
            size = len(json.dumps(data))
            print(
                f"{steps:>6} steps: first {first * 1000:6.0f} ms | warm median {statistics.median(warm) * 1000:5.0f} ms"
                f" max {max(warm) * 1000:5.0f} ms | after a new step {after_step * 1000:5.0f} ms"
                f" | JSON {size} chars, history {len(data['history'])} points"
            )
    watch = RunWatch(settings)
    watch.poll()
    t = time.perf_counter()
    for _ in range(20):
        watch.poll()
    print(f"RunWatch.poll over {len(steps_list)} runs: {(time.perf_counter() - t) / 20 * 1000:.2f} ms")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, nargs="+", default=[2000, 20000])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    anyio.run(bench, args.steps, args.rounds)


if __name__ == "__main__":
    main()
