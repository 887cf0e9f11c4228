"""Bench: what a default rl_test_inference spends per model, with and without a misbehaving model.

Runs the default smoke test (the three default OpenRouter models, 3 steps x 16 answers) twice
against the FAKE OpenRouter on loopback (tests/fakes/fake_openrouter.py), which behaves as
OpenRouter documents: `n` ignored, the models reason by default (MiniMax cannot switch it off),
usage with cost. The second run makes one model misbehave: it never answers (every answer empty,
cut at max_tokens, whatever the request options). Everything else is the real path (detached
worker, its gateway, Atropos process mode per model, the environment's scorer).

Prints requests, budget, tokens, cost and time per model; checks that the misbehaving model
cost no more than its request budget and stopped within a minute. With --compare-parallel it
also times max_parallel=3 against max_parallel=1 (the models' fake latency overlaps).

    python bench/bench_inference.py [--env arithmetic] [--steps 3] [--group-size 16] [--latency 0.0]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import anyio
from pydantic import SecretStr

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from mcp_rl.config.environment_service import EnvironmentService
from mcp_rl.inference_test import service
from mcp_rl.inference_test.models import InferenceTestResult
from mcp_rl.models import resolve_model
from mcp_rl.settings import Settings
from tests.fakes.fake_openrouter import FakeOpenRouter

KEY = "sk-or-FAKE-bench"
DEFAULTS = {"qwen/qwen3-8b": "reasoning", "z-ai/glm-4.7-flash": "reasoning", "minimax/minimax-m2.7": "mandatory"}
MISBEHAVING = "minimax/minimax-m2.7"
STOP_WITHIN_S = 60.0


def run_once(settings: Settings, env: tuple, steps: int, group_size: int, parallel: int = 3) -> InferenceTestResult:
    env_ref, env_config = env
    started = service.start_test(
        settings,
        env_ref,
        env_config,
        num_steps=steps,
        group_size=group_size,
        models=list(DEFAULTS),
        max_parallel=parallel,
    )
    return anyio.run(service.wait_for_test, settings, started.test_id, 1800.0)


def print_models(label: str, result: InferenceTestResult, wall_s: float) -> None:
    print(f"{label}: {wall_s:.1f} s, state={result.state}")
    for m in result.models_tested:
        u = m.usage
        spent = (
            f"requests {u.requests:3d}/{u.request_budget} (retries {u.retries}, refused {u.refused})  "
            f"tokens {u.total_tokens:6d}/{u.token_budget}  cost ${u.cost_usd or 0:.6f}"
            if u
            else "no usage"
        )
        print(f"  {m.model:24s} {m.state:10s} {m.elapsed_s or 0:6.1f} s  {spent}  acc={m.accuracy}")
        if m.error:
            print(f"    error: {m.error}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="arithmetic")
    parser.add_argument("--env-path", action="append", default=[], type=Path, help="extra environment folder")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--group-size", type=int, default=16)
    parser.add_argument("--latency", type=float, default=0.0, help="seconds the fake takes per request")
    parser.add_argument("--compare-parallel", action="store_true", help="also time max_parallel 3 vs 1")
    args = parser.parse_args()

    model = (
        Path(os.environ["MCP_RL_MODEL"])
        if os.environ.get("MCP_RL_MODEL")
        else resolve_model(Settings.from_env(), "default")
    )
    print(
        f"env={args.env} models={len(DEFAULTS)} steps={args.steps} group_size={args.group_size} "
        f"fake latency={args.latency}s cpus={os.cpu_count()}"
    )
    ok = True
    with tempfile.TemporaryDirectory(prefix="bench-inference-") as tmp:
        for label, behaviours in (
            ("default models", DEFAULTS),
            (f"{MISBEHAVING} never answers", {**DEFAULTS, MISBEHAVING: "silent"}),
        ):
            with FakeOpenRouter(api_key=KEY, behaviours=behaviours, latency_s=args.latency) as fake:
                settings = Settings(
                    home=Path(tmp) / label.split()[0].replace("/", "_"),
                    env_paths=args.env_path,
                    model_path=model,
                    openrouter_api_key=SecretStr(KEY),
                    openrouter_base_url=fake.base_url,
                )
                # Selecting imports the environment once (introspection); not part of what is measured.
                environments = EnvironmentService(settings)
                environments.select(args.env)
                env = service.session_environment(environments)
                t0 = time.perf_counter()
                result = run_once(settings, env, args.steps, args.group_size)
                wall = time.perf_counter() - t0
                print_models(label, result, wall)
                paid = {m: len(fake.completions_for(m)) for m in DEFAULTS}
                print(f"  requests the provider saw: {paid}")
                if behaviours[MISBEHAVING] == "silent":
                    bad = next(m for m in result.models_tested if m.model == MISBEHAVING)
                    within = bad.usage is not None and paid[MISBEHAVING] <= bad.usage.request_budget
                    quick = (bad.elapsed_s or 1e9) <= STOP_WITHIN_S
                    print(
                        f"  misbehaving model: {paid[MISBEHAVING]} requests (budget {bad.usage.request_budget if bad.usage else '?'}), "
                        f"stopped after {bad.elapsed_s} s -> {'OK' if within and quick else 'FAIL'}"
                    )
                    ok &= within and quick
                else:
                    ok &= result.summary.models_succeeded == len(DEFAULTS)
                if args.compare_parallel and behaviours is DEFAULTS:
                    t0 = time.perf_counter()
                    run_once(settings, env, args.steps, args.group_size, parallel=1)
                    sequential = time.perf_counter() - t0
                    print(f"  sequential {sequential:.1f} s / parallel {wall:.1f} s = {sequential / wall:.2f}x")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
