"""Bench: did it learn? A default local arithmetic run (shipped defaults, 30 steps), then the
base model against the trained one on the same held-out items with the paired test.

The trainer evaluates the held-out items itself before the first step (the base) and after the
last (the trained model), per item, into the run folder (eval/step_*.jsonl). This bench reads
them back, prints both scores, the difference with its 95 % interval and p, and the wall time
evaluation added to the run. Targets (issue 24): the trained model beats the base at p < 0.01,
and evaluation at both ends adds at most 15 % to the run's wall time. Exit status 1 if not.

    flock /tmp/mcp-rl-heavy.lock .venv/bin/python bench/bench_eval.py [--steps 30] [--keep]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import yaml

from mcp_rl.models import resolve_model
from mcp_rl.proof.outcomes import evaluated_steps, read_outcomes
from mcp_rl.proof.stats import paired_comparison
from mcp_rl.rundir import EVAL_SECONDS_KEY, eval_outcomes_file
from mcp_rl.settings import Settings, configs_dir
from tests.kit.run_harness import LocalRun
from tests.kit.runs import arithmetic_run_config

TARGET_P = 0.01
TARGET_OVERHEAD = 0.15


def main() -> int:
    options = yaml.safe_load((configs_dir() / "run_options.yaml").read_text(encoding="utf-8"))["local"]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=options["total_steps"])
    parser.add_argument("--keep", action="store_true", help="keep the run directory")
    args = parser.parse_args()

    from mcp_rl.environments.bundled.arithmetic import ArithmeticEnv  # atroposlib: only when needed

    env_defaults = ArithmeticEnv.config_init()[0]
    settings = Settings.from_env()
    model_dir = resolve_model(settings, options["base_model"])
    work = Path(tempfile.mkdtemp(prefix="mcp-rl-bench-eval-"))
    config = arithmetic_run_config(
        work / "run",
        model_dir,
        num_steps=args.steps,
        batch_size=options["batch_size"],
        group_size=env_defaults.group_size,
        learning_rate=options["learning_rate"],
        lora_rank=options["lora_rank"],
        max_new_tokens=env_defaults.max_new_tokens,
        save_checkpoint_interval=options.get("save_checkpoint_interval", 0),
        run_id="bench-eval",
    )
    print(
        f"bench_eval: arithmetic, local backend, model {model_dir.name}, {args.steps} steps, batch "
        f"{options['batch_size']} (groups of {env_defaults.group_size}), lr {options['learning_rate']:g}",
        flush=True,
    )
    started = time.monotonic()
    try:
        with LocalRun(config, settings.home) as run:
            run.start_all()
            code = run.wait_trainer_exit(60 * 60)
            wall = time.monotonic() - started
            metrics = run.metrics()
            status = run.status()
            steps = evaluated_steps(config.paths.run_dir)
            outcomes = {s: read_outcomes(eval_outcomes_file(config.paths.run_dir, s)) for s in steps}
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print(f"trainer exit code {code}, phase {status.get('phase')}; run wall time {wall:.0f} s")
    if code != 0 or len(steps) < 2:
        print(f"FAIL: expected exit 0 and evaluations at both ends (evaluated steps {steps}; {status.get('error')})")
        return 1
    first, last = steps[0], steps[-1]
    base = {o.item: o.score for o in outcomes[first]}
    trained = {o.item: o.score for o in outcomes[last]}
    items = [i for i in base if i in trained]
    result = paired_comparison([base[i] for i in items], [trained[i] for i in items])
    eval_s = sum(float(m[EVAL_SECONDS_KEY]) for m in metrics if EVAL_SECONDS_KEY in m and m["step"] in (first, last))
    overhead = eval_s / max(1e-9, wall - eval_s)
    print(f"evaluated at steps {steps} on {result.n} held-out items")
    print(f"base (step {first}):    {result.base_score:.3f}")
    print(f"trained (step {last}): {result.trained_score:.3f}")
    print(
        f"difference {result.difference:+.3f} (95 % CI {result.ci_low:+.3f} to {result.ci_high:+.3f}), "
        f"{result.test} p = {result.p_value:.3g}; flipped right {result.wins}, flipped wrong {result.losses}"
    )
    print(result.sentence)
    print(
        f"evaluation at both ends: {eval_s:.1f} s of a {wall:.0f} s run = +{100 * overhead:.1f} % over the run "
        f"without it (target <= {100 * TARGET_OVERHEAD:.0f} %)"
    )
    failed = False
    if not (result.p_value < TARGET_P and result.difference > 0):
        print(f"FAIL: the trained model does not beat the base at p < {TARGET_P}")
        failed = True
    if overhead > TARGET_OVERHEAD:
        print(f"FAIL: evaluation added more than {100 * TARGET_OVERHEAD:.0f} % to the run's wall time")
        failed = True
    if failed:
        return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
