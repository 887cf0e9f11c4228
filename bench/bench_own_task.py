"""Bench: a user's own task from the scaffold, at the shipped defaults, proven on its held-out items.

The scaffold (`mcp-rl new-env`) writes a task file; it is edited into a task that is not
arithmetic (reply with the larger of two two-digit numbers, 200 held-out pairs, as the slow test
does), then trained N times on the local backend at the shipped defaults (30 steps of 8 items x 4
answers). Each run's trainer evaluates the held-out items greedily at step 0 (the base) and at the
end; the bench prints base -> trained with the paired test (McNemar exact) per run, how many runs
beat the base at p < 0.01, and the wall time from start to that figure. Target: most runs.
Measured 2026-11-27 (2 cores): 2 of 2, base 0.445 -> 0.730 and 0.910, 555-782 s each.

    flock /tmp/mcp-rl-heavy.lock .venv/bin/python bench/bench_own_task.py [--runs 3] [--steps 30]
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

from mcp_rl.environments.scaffold import new_task_file
from mcp_rl.models import resolve_model
from mcp_rl.proof.outcomes import evaluated_steps, read_outcomes
from mcp_rl.proof.stats import paired_comparison
from mcp_rl.runconfig import EnvironmentRef
from mcp_rl.rundir import eval_outcomes_file
from mcp_rl.settings import Settings, configs_dir
from tests.kit.run_harness import LocalRun
from tests.kit.runs import arithmetic_run_config
from tests.tasks.test_task_run import edit_into_larger_number

TARGET_P = 0.01


def one_run(
    settings: Settings, task: Path, model_dir: Path, options: dict, steps: int, index: int, work: Path
) -> tuple[bool, float, str]:
    config = arithmetic_run_config(
        work / f"run{index}",
        model_dir,
        num_steps=steps,
        batch_size=options["batch_size"],
        group_size=4,  # the task runner's default (config_init), as a run takes it
        learning_rate=options["learning_rate"],
        lora_rank=options["lora_rank"],
        max_new_tokens=16,  # the task's max_tokens
        save_checkpoint_interval=options.get("save_checkpoint_interval", 0),
        run_id=f"bench-own-task-{index}",
    )
    config = config.model_copy(
        update={
            "environment": EnvironmentRef(
                name="larger_number", class_name="LargerNumber", file_path=task, project_root=task.parent
            )
        }
    )
    started = time.monotonic()
    with LocalRun(config, settings.home) as run:
        run.start_all()
        code = run.wait_trainer_exit(60 * 60)
        wall = time.monotonic() - started
        evaluated = evaluated_steps(config.paths.run_dir)
        outcomes = {s: read_outcomes(eval_outcomes_file(config.paths.run_dir, s)) for s in evaluated}
    if code != 0 or len(evaluated) < 2:
        return False, wall, f"FAIL: trainer exit {code}, evaluated steps {evaluated}"
    base = {o.item: o.score for o in outcomes[evaluated[0]]}
    trained = {o.item: o.score for o in outcomes[evaluated[-1]]}
    items = [i for i in base if i in trained]
    result = paired_comparison([base[i] for i in items], [trained[i] for i in items])
    proven = result.p_value < TARGET_P and result.difference > 0
    line = (
        f"n={result.n} base {result.base_score:.3f} -> trained {result.trained_score:.3f} "
        f"({result.difference:+.3f}, 95 % CI {result.ci_low:+.3f} to {result.ci_high:+.3f}; {result.test} "
        f"p = {result.p_value:.3g}; flipped right {result.wins}, wrong {result.losses}); {wall:.0f} s start to figure"
    )
    return proven, wall, line


def main() -> int:
    options = yaml.safe_load((configs_dir() / "run_options.yaml").read_text(encoding="utf-8"))["local"]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--steps", type=int, default=options["total_steps"])
    args = parser.parse_args()
    settings = Settings.from_env()
    model_dir = resolve_model(settings, options["base_model"])
    work = Path(tempfile.mkdtemp(prefix="mcp-rl-bench-own-task-"))
    try:
        made = new_task_file(settings, "larger_number", str(work / "envs"))
        task = Path(made.path)
        task.write_text(edit_into_larger_number(task.read_text()))
        print(
            f"bench_own_task: larger_number from the scaffold ({task}), local backend, model {model_dir.name}, "
            f"{args.steps} steps of {options['batch_size']}, {args.runs} runs",
            flush=True,
        )
        proven_runs = 0
        walls = []
        for i in range(1, args.runs + 1):
            proven, wall, line = one_run(settings, task, model_dir, options, args.steps, i, work)
            proven_runs += proven
            walls.append(wall)
            print(f"run {i}: {line}{'' if proven else '  (not p < 0.01)'}", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(
        f"{proven_runs} of {args.runs} runs beat the base at p < {TARGET_P} on the held-out items; wall time start to "
        f"figure {min(walls):.0f}-{max(walls):.0f} s"
    )
    if proven_runs * 2 <= args.runs:
        print("FAIL: fewer than most runs proved a gain")
        return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
