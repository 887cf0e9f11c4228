"""Bench: rl_test_inference's models in parallel vs in sequence.

Runs the same smoke test of an environment against three models twice — all three at once
(max_parallel=3, the default) and one after another (max_parallel=1) — and prints the wall times
and their ratio. The models are served by the FAKE OpenRouter (tests/fakes/fake_openrouter.py) on
loopback with a fixed latency per request standing in for remote generation time; everything
else is the real path (detached worker, Atropos process mode per model, the env's scorer).

    python bench/bench_inference.py [--env arithmetic] [--steps 3] [--group-size 8] [--latency 3.0]
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

from mcp_rl.environments.service import EnvironmentService  # noqa: E402
from mcp_rl.inference_test import service  # noqa: E402
from mcp_rl.inference_test.models import InferenceTestResult  # noqa: E402
from mcp_rl.models import resolve_model  # noqa: E402
from mcp_rl.settings import Settings  # noqa: E402
from tests.fakes.fake_openrouter import FakeOpenRouter  # noqa: E402

MODELS = ["fake/small-model", "fake/medium-model", "fake/large-model"]


def run_once(settings: Settings, env: tuple, steps: int, group_size: int, parallel: int) -> InferenceTestResult:
    env_ref, env_config = env
    started = service.start_test(
        settings, env_ref, env_config, num_steps=steps, group_size=group_size, models=MODELS, max_parallel=parallel
    )
    return anyio.run(service.wait_for_test, settings, started.test_id, 1800.0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="arithmetic")
    parser.add_argument("--env-path", action="append", default=[], type=Path, help="extra environment folder")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--latency", type=float, default=3.0, help="seconds the fake takes per request (remote generation time)")
    args = parser.parse_args()

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    model = Path(os.environ["MCP_RL_MODEL"]) if os.environ.get("MCP_RL_MODEL") else resolve_model(Settings.from_env(), "default")
    print(f"env={args.env} models={len(MODELS)} steps={args.steps} group_size={args.group_size} "
          f"fake latency={args.latency}s cpus={os.cpu_count()}")
    times: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="bench-inference-") as tmp, FakeOpenRouter(latency_s=args.latency) as fake:
        settings = Settings(
            home=Path(tmp),
            env_paths=args.env_path,
            model_path=model,
            openrouter_api_key=SecretStr("sk-or-FAKE-bench"),
            openrouter_base_url=fake.base_url,
        )
        # Selecting imports the environment once (introspection); not part of what is measured.
        environments = EnvironmentService(settings)
        environments.select(args.env)
        env = service.session_environment(environments)
        for label, parallel in (("parallel", 3), ("sequential", 1)):
            t0 = time.perf_counter()
            result = run_once(settings, env, args.steps, args.group_size, parallel)
            times[label] = time.perf_counter() - t0
            per_model = ", ".join(f"{m.model.split('/')[1]} {m.state} {m.elapsed_s:.1f}s acc={m.accuracy}" for m in result.models_tested)
            print(f"{label:>10}: {times[label]:6.1f} s  state={result.state}  [{per_model}]")
            if result.summary.models_succeeded != len(MODELS):
                print(f"warning: {result.message}")
    print(f"sequential / parallel = {times['sequential'] / times['parallel']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
