"""Bench: rl_evaluate_checkpoint against the run's own held-out evaluation, side by side.

A local arithmetic run folder with a saved checkpoint (a real LoRA adapter of the default model,
tests/kit/runs.py) and the run's own step-0 evaluation of its base (HeldOutEvaluator at step 0, as
every fresh run does before training), then on its held-out items (201 at the defaults):

  run      the trainer's evaluation path (HeldOutEvaluator.evaluate on the checkpoint's weights,
           as the run evaluates at a step): its `eval/seconds`, the model already loaded;
  ckpt     the checkpoint evaluation as the tool starts it (detached worker: a process, the items,
           the checkpoint and its base each loaded and answered, compared), wall time from the
           start to the completed result, and each model's own seconds.

Target (issue 44): the whole call within 1.5x the run's evaluation of the same items, the median of
alternated rounds (the load of a shared machine changes between two measurements). The base is not
decoded again: the worker reuses the run's step-0 outcomes (same items, greedy, same model folder
and max_tokens), so the call is a process start, one load and the checkpoint's answering. The
trained model's own seconds are printed beside it. Exit status 1 if the target is missed, the
figures differ or the base was decoded again.

Measured on the shared 2-core machine (load 4-12), 201 arithmetic items: before (chunks of 32) the
trained model took 42.8 s against the run's 7.7 s (5.5x; the whole call 176 s); with the run's
batches 41.7 s vs 43.0 s and 39.0 s vs 35.3 s (0.97x, 1.11x; the whole call, both models, 82 s and
73 s: 1.9-2.1x one run evaluation, 1.0x the run's two). With the base's step-0 outcomes reused
(64 items, --rounds 2, load ~3): the run 37.9 s and 26.5 s, the whole call 47.9 s and 33.1 s
(1.26x, 1.25x; the trained model alone 1.12x, 1.14x; the base 0.0 s, its score 0.172 as at step 0).

    flock /tmp/mcp-rl-heavy.lock .venv/bin/python bench/bench_checkpoint_eval.py [--items N] [--rounds 3] [--keep]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from mcp_rl.models import resolve_model
from mcp_rl.settings import Settings
from tests.kit.runs import write_local_checkpoint_run

TARGET_RATIO = 1.5


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=None, help="held_out_limit (default: every item)")
    parser.add_argument("--rounds", type=int, default=3, help="alternated run/checkpoint measurements")
    parser.add_argument("--keep", action="store_true", help="keep the home folder")
    args = parser.parse_args()

    model_dir = resolve_model(Settings.from_env(), "default")
    home = Path(tempfile.mkdtemp(prefix="mcp-rl-bench-ckpt-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("MCP_RL_")}
    env.update({"MCP_RL_HOME": str(home), "MCP_RL_MODEL": str(model_dir)})
    settings = Settings.from_env(env)
    try:
        config, _ = write_local_checkpoint_run(settings, "bench", model_dir, steps=(2,), held_out_limit=args.items)
        adapter = config.paths.checkpoints_dir / "step_000002" / "adapter"
        # The run's own step-0 evaluation of its base (as every fresh run does before training): the
        # checkpoint evaluation reuses its outcomes for the base instead of decoding them again.
        base_s, base_n, base_score = _run_evaluation(config, model_dir, None, step=0)
        print(f"[0] run : base at step 0, {base_n} items in {base_s:.1f} s (score {base_score:.3f})", flush=True)
        ratios, ok = [], True
        # Alternated, round after round: on a shared machine the load changes between two measurements.
        for round_ in range(1, args.rounds + 1):
            run_s, run_n, run_score = _run_evaluation(config, model_dir, adapter)
            print(f"[{round_}] run : {run_n} items in {run_s:.1f} s (score {run_score:.3f}; model loaded)", flush=True)
            wall, result = _checkpoint_evaluation(settings)
            models = {m.role: m for m in result.models}
            trained, base = models["trained"], models["base"]
            print(
                f"[{round_}] ckpt: {result.items} items, {result.state}, {wall:.1f} s wall for both models; trained "
                f"{trained.seconds} s (score {trained.score}, its load included), base {base.seconds} s "
                f"(score {base.score}; {base.note or 'decoded again'})",
                flush=True,
            )
            ratio = wall / run_s
            ratios.append(ratio)
            print(
                f"[{round_}] ratio: whole call {ratio:.2f}x the run's evaluation (target <= {TARGET_RATIO}); "
                f"trained model alone {(trained.seconds or float('inf')) / run_s:.2f}x",
                flush=True,
            )
            same = trained.score is not None and abs(trained.score - run_score) <= 2 / max(1, run_n)
            same = same and base.score == base_score and base.note is not None
            ok = ok and result.state == "completed" and same
        median = sorted(ratios)[len(ratios) // 2]
        print(f"median ratio over {len(ratios)} rounds: {median:.2f}x (target <= {TARGET_RATIO}); same figures: {ok}")
        return 0 if ok and median <= TARGET_RATIO else 1
    finally:
        if not args.keep:
            shutil.rmtree(home, ignore_errors=True)
        else:
            print(f"kept {home}")


def _run_evaluation(config, model_dir: Path, adapter: Path | None, step: int = 2) -> tuple[float, int, float]:  # type: ignore[no-untyped-def]
    from mcp_rl.rundir import EVAL_N_KEY, EVAL_SCORE_KEY, EVAL_SECONDS_KEY
    from mcp_rl.trainer.backends.local import LocalBackend, configure_torch_threads
    from mcp_rl.trainer.trainer_eval import HeldOutEvaluator

    configure_torch_threads(0)
    backend = LocalBackend(model_dir, train=False, seed=0, adapter_dir=adapter)
    evaluator = HeldOutEvaluator(config)
    evaluator.held_out()  # the items are made once per run, before its first evaluation
    metrics = evaluator.evaluate(backend, step)
    del backend
    return float(metrics[EVAL_SECONDS_KEY]), int(metrics[EVAL_N_KEY]), float(metrics[EVAL_SCORE_KEY])


def _checkpoint_evaluation(settings: Settings):  # type: ignore[no-untyped-def]
    from mcp_rl.evaluation import checkpoint_eval

    began = time.monotonic()
    started = checkpoint_eval.start_evaluation(settings, "bench", 2)
    deadline = began + 1800
    result = started
    while time.monotonic() < deadline:
        result = checkpoint_eval.read_evaluation(settings, started.eval_id)
        if result.state != "running":
            break
        time.sleep(0.5)  # polling the detached worker's result file, with a deadline
    return time.monotonic() - began, result


if __name__ == "__main__":
    sys.exit(main())
