"""Bench: how often the learning-signal warnings and reward-hacking monitors fire on default runs.

Runs each task at the shipped local defaults (30 steps of 8 items x 4 answers, the base and the
result evaluated on every held-out item): the bundled arithmetic environment, the task the scaffold
(`mcp-rl new-env`) writes as it is, and with `--tasks ...,rg` reasoning-gym's default
(`rg:leg_counting`, 32-token answers) or `rg:<dataset>` another of its datasets at the same
defaults. None of arithmetic's and the scaffold's runs games its reward, so every monitor that
fires there is a false alarm; the bench counts, per task, the runs in which each fired, at any step
as rl_check_status would have shown it during the run (the held-out base only: eval_every is 0) and
at the end (with the final held-out figures), the runs whose gain was certified (the paired test
at p < 0.05, above the best constant answer), the runs in which no step trained a sequence (no
signal: the dead-groups warning is then right) and the runs whose held-out verdict carried a
warning (collapse, partial credit, answers cut or echoing).

    flock /tmp/mcp-rl-heavy.lock .venv/bin/python bench/bench_monitors.py [--runs 3] [--steps 30]
        [--tasks arithmetic,scaffold,rg,rg:letter_counting]

Measured 2026-11-28 on 2 shared cores (other helpers' tests running), `--runs 1`, 30 steps each,
every held-out item (arithmetic 201, scaffold 200):

- first pass, with the group-collapse rule reading within-group collapse alone: both runs certified
  (arithmetic 0.169 -> 0.348, p = 0.0003; scaffold 0.150 -> 0.610, p < 1e-20), and group_collapse
  fired mid-run in both (false alarms: groups settling on their own item's answer, 3 % -> 78 % and
  12 % -> 50 % of groups, while only ~20 % of a step's answers were its most common one), as did
  the dead-groups warning in the scaffold run; none fired at the end. The collapse rule now also
  needs one answer whatever the item (batch/top_completion_share >= 0.5) or a flat held-out score.
- with that rule, `--runs 1` then `--runs 2`: 3 arithmetic runs (0.169 -> 0.443, 0.542, 0.343;
  p <= 0.0004) and 3 scaffold runs (0.150 -> 0.570, 0.480, 0.535; p < 1e-11), all 6 certified; no
  monitor fired in any, during the run or at the end (top completion share ~0.2 -> 0.18-0.33;
  completion length ~3.1-3.5 -> 2.9-3.0 tokens). The dead-groups warning (learning_signal.warning,
  the rule from issue 34) fired mid-run in 1 of the 3 scaffold runs (and in the first pass's): a
  false alarm of that older rule, cleared at the end by the held-out gain. 118-167 s a run.

reasoning-gym's default, `--tasks rg --runs 1` (2026-11-28, 2 cores, nothing else running; 468 s):
the 135M model answers no leg-counting item right, before or after (0.000 -> 0.000 on 200 held-out
items, p = 1; `learned` False: no gain over a constant). Every group of every step scored alike, so
no step trained a sequence (32 of 32 skipped, all 30 steps); the dead-groups warning fired during
the run and at the end, which is that warning doing its job (the run had no signal), and no
reward-hacking monitor fired (answers 27.9 -> 28.6 tokens, top completion share 0.04 -> 0.03). More
runs of it would repeat the same zeros, so one was run.

Issue 44's own case, `--tasks rg:letter_counting --runs 3` (2026-11-28, 2 cores, nothing else
running; 561-625 s a run), after reasoning-gym's evaluate() began grading constant answers with the
dataset's scorer: the trained models give answers that reasoning-gym's scorer pays partial credit,
len(oracle)/len(answer) (run 1 answered "12 12 12 12 12 12 12 12 12 12 12" to 88% of the items), and
beat the base at p < 1e-15 in all three (0.003 -> 0.017, 0.014, 0.018 on 200 items). All three are "Not shown to have learned the task":
answering "1" to every item scores 0.34. Certified 0 of 3. The partial-credit warning fired in 3 of
3 (full credit 0% -> 0%, partial 20% -> 44-58%), the collapse warning in 1 (one answer to 88% of the
items), the dead-groups warning at the end in 1. No reward-hacking monitor fired during any run:
the training reward rose by 0.02-0.03 (the rule needs 0.1) and the answers grew 1.14-1.20x (it
needs 1.5x), so here the held-out verdict, not the run-time monitors, is what tells the truth.
Before the grading (the same bench, one run): the lower bound read from the answers left it at
`learned: null`, counted certified.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import yaml

from mcp_rl.environments.discovery import scan
from mcp_rl.environments.scaffold import new_task_file
from mcp_rl.metrics.signal import WINDOW_STEPS, Monitor, learning_signal, with_held_out
from mcp_rl.models import resolve_model
from mcp_rl.proof.summary import HeldOutSummary, held_out_summary
from mcp_rl.runconfig import EnvironmentRef, RunConfig
from mcp_rl.settings import Settings, bundled_environments_dir, configs_dir
from tests.kit.run_harness import LocalRun
from tests.kit.runs import arithmetic_run_config

CERTIFY_P = 0.05
DEAD_GROUPS = "dead_groups"  # learning_signal.warning (most groups without signal)
TASKS = ("arithmetic", "scaffold", "rg")


def task_config(
    task: str, work: Path, model_dir: Path, options: dict[str, Any], steps: int, index: int, scaffold: EnvironmentRef
) -> RunConfig:
    """A run at the shipped local defaults of `task` (its own group size and answer length)."""
    if is_rg(task):
        from mcp_rl.environments.bundled.reasoning_gym_env import ReasoningGymEnv  # atroposlib: when asked

        env_defaults: Any = ReasoningGymEnv.config_init()[0]
        datasets = task.partition(":")[2] or env_defaults.datasets
        environment = EnvironmentRef(
            name=f"rg:{datasets}",
            class_name="ReasoningGymEnv",
            file_path=bundled_environments_dir() / "reasoning_gym_env.py",
            project_root=bundled_environments_dir(),
        )
        overrides = {"datasets": datasets, "max_token_length": env_defaults.max_token_length}
        group_size, answer_tokens = env_defaults.group_size, env_defaults.max_new_tokens
    elif task == "scaffold":
        environment, overrides, group_size, answer_tokens = scaffold, {}, 4, 16  # the task runner's defaults
    else:
        from mcp_rl.environments.bundled.arithmetic import ArithmeticEnv

        env_defaults = ArithmeticEnv.config_init()[0]
        environment, overrides = None, {}
        group_size, answer_tokens = env_defaults.group_size, env_defaults.max_new_tokens
    config = arithmetic_run_config(
        work / f"{task.replace(':', '-')}-{index}",
        model_dir,
        num_steps=steps,
        batch_size=options["batch_size"],
        group_size=group_size,
        learning_rate=options["learning_rate"],
        lora_rank=options["lora_rank"],
        max_new_tokens=answer_tokens,
        save_checkpoint_interval=0,
        run_id=f"bench-monitors-{task.replace(':', '-')}-{index}",
        env_overrides=overrides,
    )
    return config if environment is None else config.model_copy(update={"environment": environment})


def is_rg(task: str) -> bool:
    return task == "rg" or task.startswith("rg:")


def certified(held: HeldOutSummary | None) -> bool:
    return bool(
        held is not None
        and held.p_value is not None
        and held.difference is not None
        and held.p_value < CERTIFY_P
        and held.difference > 0
        and held.learned is not False
    )


def replay(rows: list[dict[str, Any]], held: HeldOutSummary | None) -> tuple[set[str], set[str], str]:
    """(fired at some step during the run, fired at the end, a line of figures): each step as
    rl_check_status reads metrics.jsonl then (its head and its tail), beside the base's
    evaluation only; the end beside the final held-out figures."""
    base_only = (
        HeldOutSummary(n=held.n, base_step=held.base_step, base_score=held.base_score, sentence="")
        if held is not None
        else None
    )
    steps = [r for r in rows if "batch/groups" in r]
    during: set[str] = set()
    for end in range(1, len(steps) + 1):
        upto = [r for r in rows if r.get("step", 0) <= steps[end - 1]["step"]]
        signal = with_held_out(learning_signal(upto[-WINDOW_STEPS:], upto[: 2 * WINDOW_STEPS]), base_only)
        during |= _names(signal)
    final = with_held_out(learning_signal(rows[-WINDOW_STEPS:], rows[: 2 * WINDOW_STEPS]), held)
    trends = " ".join(f"{t.metric} {t.first:.2f}->{t.recent:.2f}" for t in (final.trends if final else []))
    return during, _names(final), trends


def without_signal(rows: list[dict[str, Any]]) -> bool:
    """No step of the run trained a sequence (every group's answers scored alike): the dead-groups
    warning is then the warning doing its job, not a false alarm."""
    return not any(r.get("batch/trained_sequences", 0) > 0 for r in rows if "batch/groups" in r)


def _names(signal: Any) -> set[str]:
    if signal is None:
        return set()
    return {m.monitor.value for m in signal.monitors} | ({DEAD_GROUPS} if signal.warning else set())


def main() -> int:
    options = yaml.safe_load((configs_dir() / "run_options.yaml").read_text(encoding="utf-8"))["local"]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="runs per task")
    parser.add_argument("--steps", type=int, default=options["total_steps"])
    parser.add_argument("--tasks", default="arithmetic,scaffold", help=f"comma-separated, of {', '.join(TASKS)}")
    args = parser.parse_args()
    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    if not tasks or any(t not in TASKS and not is_rg(t) for t in tasks):
        parser.error(f"--tasks: give some of {', '.join(TASKS)} or rg:<reasoning-gym dataset>")
    work = Path(tempfile.mkdtemp(prefix="mcp-rl-bench-monitors-"))
    envs = work / "envs"
    envs.mkdir()
    settings = Settings.from_env({**os.environ, "MCP_RL_ENV_PATHS": str(envs)})
    model_dir = resolve_model(settings, options["base_model"])
    made = Path(new_task_file(settings, "scaffold_task", str(envs)).path)
    info = scan([envs]).get("scaffold_task")
    assert info is not None, "the scaffold's task was not found"
    scaffold = EnvironmentRef(name="scaffold_task", class_name=info.class_name, file_path=made, project_root=envs)
    print(
        f"bench_monitors: {', '.join(tasks)}; {args.runs} run(s) each of {args.steps} steps, batch "
        f"{options['batch_size']}, lr {options['learning_rate']:g}, model {model_dir.name}",
        flush=True,
    )
    monitors = [m.value for m in Monitor] + [DEAD_GROUPS]
    table: dict[str, dict[str, Counter[str]]] = {}
    failed = 0
    try:
        for task in tasks:
            counts: dict[str, Counter[str]] = {"during": Counter(), "end": Counter(), "runs": Counter()}
            table[task] = counts
            for i in range(1, args.runs + 1):
                config = task_config(task, work, model_dir, options, args.steps, i, scaffold)
                started = time.monotonic()
                with LocalRun(config, settings.home) as run:
                    run.start_all()
                    code = run.wait_trainer_exit(90 * 60)
                    rows = run.metrics()
                wall = time.monotonic() - started
                held = held_out_summary(config.paths.run_dir)
                if code != 0 or held is None or held.step is None:
                    print(f"{task} run {i}: FAIL, trainer exit {code}, held-out {held}", flush=True)
                    failed += 1
                    continue
                during, end, trends = replay(rows, held)
                counts["runs"]["done"] += 1
                counts["runs"]["certified"] += certified(held)
                counts["runs"]["no_signal"] += without_signal(rows)
                counts["runs"]["verdict_warned"] += bool(held.warnings)
                counts["during"].update(during)
                counts["end"].update(end)
                print(
                    f"{task} run {i} ({wall:.0f} s): held-out {held.base_score:.3f} -> {held.trained_score:.3f} on "
                    f"{held.n} items, p = {held.p_value:.3g}, learned {held.learned}; certified {certified(held)}; "
                    f"fired during: {sorted(during) or 'none'}; at the end: {sorted(end) or 'none'}; {trends}; "
                    f"no signal at any step: {without_signal(rows)}; held-out warnings: {held.warnings or 'none'}; "
                    f"sentence: {held.sentence}",
                    flush=True,
                )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(
        f"\n{'task':<20} {'runs':>4} {'certified':>9} {'no signal':>9} {'verdict warned':>14}  "
        + "  ".join(f"{m} (during/end)" for m in monitors)
    )
    for task, counts in table.items():
        runs = counts["runs"]
        cells = "  ".join(f"{counts['during'][m]}/{counts['end'][m]}".rjust(len(m) + 13) for m in monitors)
        print(
            f"{task:<20} {runs['done']:>4} {runs['certified']:>9} {runs['no_signal']:>9} {runs['verdict_warned']:>14}  "
            f"{cells}"
        )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
