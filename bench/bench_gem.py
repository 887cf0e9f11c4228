"""GEM learning on the local backend: game:GuessTheNumber-v0-easy, through a real stdio MCP server.

Selects the GEM id, shortens the run with rl_edit_config, starts it with rl_start_training,
polls rl_check_status until it completes, then prints per trainer step the episode return and
success rate the environment measured (env_metrics.jsonl: episodes played since the previous
step) and the trainer's reward/mean (mean discounted return of the trained transitions). Last:
the mean success rate of the first and of the last `--window` steps (and of twice as many), with
the p-value of a one-sided two-proportion z-test (is the gain noise?); exit 1 unless the last
`--window` is higher.

Everything is real: the embedded SmolLM2-135M-Instruct, the trainer, Atropos run-api, GemEnv.
The settings below are the ones tuned for 2 CPU cores (short prefilled answers, small groups)
and train on wins only (`partial_credit` off: GuessTheNumber's near-miss credit at the turn limit
otherwise pays almost as well as winning); see docs/design-notes.md, "GEM environments".

Run: MCP_RL_TORCH_THREADS=2 python bench/bench_gem.py [--steps 80] [--window 10] [--home DIR]
(about an hour on 2 cores: ~43 s a step; the defaults are the measured configuration in the
design notes)
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
from mcp import Client, StdioServerParameters

GEM_ID = "game:GuessTheNumber-v0-easy"
RUN_DEADLINE_S = 4 * 3600


def server_params(home: Path) -> StdioServerParameters:
    env = {
        "PATH": os.environ.get("PATH", ""),
        "MCP_RL_HOME": str(home),
        "MCP_RL_STATUS_MIN_INTERVAL": "0",
        "HF_HUB_OFFLINE": "1",
    }
    for name in ("MCP_RL_MODEL", "MCP_RL_TORCH_THREADS"):  # a dedicated machine may give the trainer every core
        if os.environ.get(name):
            env[name] = os.environ[name]
    return StdioServerParameters(command=sys.executable, args=["-m", "mcp_rl", "serve"], env=env)


async def call(client: Client, name: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
    result = await client.call_tool(name, args or {})
    if result.is_error:
        raise SystemExit(f"{name}{args or ''} failed: {result.content[0].text}")
    return result.structured_content or {}


async def set_group_and_batch(client: Client, group: int, batch: int) -> None:
    """Edit both, bridging through a batch that suits the old and new group (batch % group == 0 always)."""
    current = await call(client, "rl_get_current_config")
    old_group = next(f["current_value"] for f in current["configurable_fields"] if f["name"] == "group_size")
    await call(client, "rl_edit_config", {"field": "batch_size", "value": math.lcm(old_group, group)})
    await call(client, "rl_edit_config", {"field": "group_size", "value": group})
    await call(client, "rl_edit_config", {"field": "batch_size", "value": batch})


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue  # a line being written
    return out


def one_sided_p(first: float, n1: int, last: float, n2: int) -> float:
    """p-value of "the last window's success rate is higher" under the null of equal rates
    (two-proportion z-test, pooled): small means the gain is not noise."""
    pooled = (first * n1 + last * n2) / (n1 + n2)
    se = math.sqrt(pooled * (1 - pooled) * (1 / n1 + 1 / n2))
    if se == 0:
        return 0.5
    z = (last - first) / se
    return 0.5 * math.erfc(z / math.sqrt(2))


def per_step(env_lines: list[dict[str, Any]]) -> dict[int, dict[str, float]]:
    """The GEM metrics line of each step (episodes finished since the previous one)."""
    steps: dict[int, dict[str, float]] = {}
    for line in env_lines:
        if "gem/episode_return" in line:
            steps[int(line["step"])] = line
    return steps


async def run(args: argparse.Namespace) -> int:
    home = Path(args.home) if args.home else Path(tempfile.mkdtemp(prefix="bench-gem-"))
    edits: dict[str, Any] = {
        "total_steps": args.steps,
        "learning_rate": args.lr,
        "lora_rank": args.lora_rank,
        "num_envs": args.num_envs,
        "max_tokens_per_turn": args.max_tokens,
        "template": "qwen3_game_prefill",
        "wrappers": "concat",
        "gamma": 0.9,
        "batch_normalize": True,
        "partial_credit": args.partial_credit,
        "save_checkpoint_interval": 0,
        "temperature": args.temperature,
    }
    if args.env_kwargs:
        edits["env_kwargs"] = json.loads(args.env_kwargs)
    started_at = time.monotonic()
    async with Client(server_params(home)) as client:
        await call(client, "rl_select_environment", {"name": GEM_ID})
        # One group per step: ReBN over the whole batch, as the recipe.
        await set_group_and_batch(client, args.group, args.group)
        for field, value in edits.items():
            await call(client, "rl_edit_config", {"field": field, "value": value})
        started = await call(client, "rl_start_training")
        run_id = started["run_id"]
        print(
            f"run {run_id} in {home} (group_size=batch_size={args.group}, {', '.join(f'{k}={v}' for k, v in edits.items())})",
            flush=True,
        )
        run_dir = home / "runs" / run_id
        printed = 0
        print(
            f"{'step':>4}  {'episode_return':>14}  {'success_rate':>12}  {'episodes':>8}  {'turns':>5}  "
            f"{'reward/mean':>11}  {'kl(logprobs/diff)':>17}  {'seconds':>7}",
            flush=True,
        )
        end = time.monotonic() + RUN_DEADLINE_S
        status: dict[str, Any] = {}
        while time.monotonic() < end:
            status = await call(client, "rl_check_status", {"run_id": run_id})
            trainer = {m["step"]: m for m in read_jsonl(run_dir / "metrics.jsonl")}
            gem = per_step(read_jsonl(run_dir / "env_metrics.jsonl"))
            done = status["status"] in {"completed", "failed", "stopped"}
            ready = sorted(s for s in trainer if s > printed and (s in gem or done))
            for step in ready:
                t, g = trainer[step], gem.get(step, {})
                print(
                    f"{step:>4}  {g.get('gem/episode_return', float('nan')):>14.3f}  "
                    f"{g.get('gem/success_rate', float('nan')):>12.3f}  {g.get('gem/episodes', 0):>8.0f}  "
                    f"{g.get('gem/turns_per_episode', float('nan')):>5.2f}  {t.get('reward/mean', float('nan')):>11.3f}  "
                    f"{t.get('logprobs/diff', float('nan')):>17.4f}  {t.get('time/step_seconds', float('nan')):>7.1f}",
                    flush=True,
                )
                printed = step
            if done:
                break
            await anyio.sleep(2.0)
    if status.get("status") != "completed":
        print(f"run ended {status.get('status')}: {status.get('error') or status.get('cause')}")
        return 1
    gem = per_step(read_jsonl(run_dir / "env_metrics.jsonl"))
    steps = sorted(gem)
    window = min(args.window, len(steps) // 2)
    if window < 1:
        print("not enough steps with GEM metrics to compare")
        return 1

    def mean_success(chosen: list[int]) -> tuple[float, int]:
        # Weighted by episodes: every episode counts once.
        episodes = sum(gem[s]["gem/episodes"] for s in chosen)
        wins = sum(gem[s]["gem/success_rate"] * gem[s]["gem/episodes"] for s in chosen)
        return wins / episodes, int(episodes)

    minutes = (time.monotonic() - started_at) / 60
    # The requested window decides the exit status; twice as wide is printed too (more episodes).
    improved = False
    for size in sorted({window, min(2 * window, len(steps) // 2)}):
        first, first_n = mean_success(steps[:size])
        last, last_n = mean_success(steps[-size:])
        print(f"success rate, first {size} steps: {first:.3f} ({first_n} episodes)")
        print(f"success rate, last {size} steps:  {last:.3f} ({last_n} episodes)")
        p_value = one_sided_p(first, first_n, last, last_n)
        print(f"one-sided p (two-proportion z-test) that the gain is noise: {p_value:.4f}")
        if size == window:
            improved = last > first
    print(f"{'IMPROVED' if improved else 'NOT IMPROVED'} in {minutes:.1f} min")
    return 0 if improved else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=80)
    parser.add_argument("--window", type=int, default=10)
    parser.add_argument("--group", type=int, default=32, help="transitions per group = per step")
    parser.add_argument(
        "--num-envs", type=int, default=8, help="episodes played at once (their turns are one sampler batch)"
    )
    parser.add_argument("--max-tokens", type=int, default=4)
    parser.add_argument("--lr", type=float, default=5e-4)
    parser.add_argument("--lora-rank", type=int, default=8)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument(
        "--partial-credit",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="train on GuessTheNumber's near-miss credit too (default: wins and penalties only)",
    )
    parser.add_argument("--env-kwargs", default=None, help="JSON for gem.make, e.g. '{\"max_turns\": 6}'")
    parser.add_argument("--home", default=None, help="state dir (default: a fresh temporary one)")
    return anyio.run(run, parser.parse_args())


if __name__ == "__main__":
    raise SystemExit(main())
