"""Why a run has no held-out figures (`held_out: null`), in words that name what to do: shown by
rl_check_status and rl_get_results beside the null, so it is never without a reason. Reads the
run's run.yaml and its environment's source (no import of the environment)."""

from __future__ import annotations

from pathlib import Path

from mcp_rl.proof.env_eval import CONFIG_FILE, LOG_FILE, NO_SCORE_FILE, uses_own_evaluate, what_to_add
from mcp_rl.proof.heldout import ITEM_ENVIRONMENTS, is_gem, is_task
from mcp_rl.runconfig import RunConfig
from mcp_rl.rundir import EVAL_DIR, RUN_FILE


def held_out_note(run_dir: Path, ended: bool) -> str:
    """The reason a run's held-out summary is None (call it only then)."""
    try:
        config = RunConfig.load(run_dir / RUN_FILE)
    except Exception:
        return "No held-out figures: the run's run.yaml cannot be read, so its environment is unknown."
    env = config.environment
    logs = f"rl://runs/{config.run_id}/logs/trainer"
    if is_gem(env.name):
        return (
            f"No held-out figures: {env.name} is a GEM environment; its fixed eval seeds (eval_episodes) are "
            "played only by its own evaluate(), which mcp-rl's trainer does not run for GEM yet. Compare runs by "
            "their gem/success_rate, or train a task with held-out items (arithmetic, a task file)."
        )
    if env.name in ITEM_ENVIRONMENTS or is_task(env):
        source = "its held-out items"
    elif uses_own_evaluate(env.name, env.file_path, env.class_name):
        source = "its own evaluate()"
    else:
        return f"No held-out figures: {what_to_add(env.name, env.class_name, env.file_path)}"
    if not ended:
        return (
            f"No held-out figures yet: the first evaluation ({source}) runs before step 1 and the last after the "
            "final step; they appear here as they finish."
        )
    tried = sorted((run_dir / EVAL_DIR).glob(f"env_step_*/{LOG_FILE}"))
    where = f"; its output is in {tried[-1]}" if tried and (tried[-1].parent / CONFIG_FILE).exists() else ""
    why = _no_score(tried[-1].parent) if tried else None
    if why:
        return f"No held-out figures were recorded although the environment has {source}: {why}{where}."
    return (
        f"No held-out figures were recorded although the environment has {source}: the evaluation failed or "
        f"reported no score (the trainer log {logs} says why{where})."
    )


def _no_score(folder: Path) -> str | None:
    """What an evaluation that found no score reported (env_eval writes it), clipped."""
    try:
        return (folder / NO_SCORE_FILE).read_text(encoding="utf-8").strip()[:1500] or None
    except OSError:
        return None
