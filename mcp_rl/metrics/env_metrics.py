"""Capture of what an Atropos environment logs, into `runs/<id>/env_metrics.jsonl`.

Atropos environments report their own measures (percent correct, eval results, completion
lengths) only through `BaseEnv.wandb_log`, and only to W&B: with W&B off they are computed and
thrown away. Inside the environment process (`mcp_rl.environments.runner`), `install` wraps
`BaseEnv.wandb_log` so that every call also appends the numbers to a JSONL file, one line per
call: `{"step": <env step = trainer step>, "time": ..., "train/percent_correct": ..., ...}` with
the keys as the environment names them (without the W&B prefix). The results service merges
them with the trainer's metrics by step.

Runs in the environment process only; atroposlib is imported inside `install`.
"""

from __future__ import annotations

import json
import logging
import math
import numbers
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mcp_rl.rundir import ENV_METRICS_FILE, RUN_FILE, STEP_KEY, TIME_KEY

log = logging.getLogger(__name__)

_MARK = "_mcp_rl_env_metrics_capture"


def numeric_metrics(metrics: dict[str, Any]) -> dict[str, float]:
    """The finite numbers of a metrics dict (tables, media and strings are W&B-only)."""
    out = {}
    for key, value in metrics.items():
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            continue
        number = float(value)
        if math.isfinite(number):
            out[str(key)] = number
    return out


def append_metrics(path: Path, step: int, metrics: dict[str, Any]) -> None:
    numbers_only = numeric_metrics(metrics)
    if not numbers_only:
        return
    line = json.dumps({STEP_KEY: int(step), TIME_KEY: time.time(), **numbers_only})
    # One write of a whole line, flushed: a reader sees complete lines or an unterminated tail.
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(line + "\n")
        fh.flush()


def install(path: Path) -> None:
    """Make every `BaseEnv.wandb_log` call of this process also append to `path` (idempotent)."""
    # atroposlib is heavy: only the environment process (which has it loaded) installs the hook
    from atroposlib.envs.base import BaseEnv

    original = BaseEnv.wandb_log
    if getattr(original, _MARK, False):
        return

    async def wandb_log(self: Any, wandb_metrics: dict[str, Any] | None = None) -> None:
        # The base method adds its own keys to the dict it is given (completion lengths, perf
        # stats) before prefixing a copy for W&B, so after the call this dict holds all of them.
        metrics = {} if wandb_metrics is None else wandb_metrics
        try:
            await original(self, metrics)
        finally:
            try:
                append_metrics(path, getattr(self, "curr_step", 0), metrics)
            except OSError as exc:  # metrics capture must never take the environment down
                log.warning("could not record environment metrics to %s: %s", path, exc)

    setattr(wandb_log, _MARK, True)
    BaseEnv.wandb_log = wandb_log


def install_for_run(mode: str, env_args: Sequence[str]) -> Path | None:
    """Install the capture when the runner starts a run's environment (`serve --config
    runs/<id>/run.yaml`); returns the file written, or None (smoke tests, other modes)."""
    if mode != "serve":
        return None
    config = _option(env_args, "--config")
    if config is None or Path(config).name != RUN_FILE:
        return None
    path = Path(config).resolve().parent / ENV_METRICS_FILE
    install(path)
    return path


def install_for_evaluate(cls: Any, mode: str, env_args: Sequence[str]) -> Path | None:
    """Atropos's `evaluate` mode started by mcp-rl (mcp_rl.evaluation.env_eval, its config
    `evaluate.yaml` in the evaluation's folder): what the environment logs through wandb_log, and
    a `self.eval_metrics` list of (name, value) it leaves for the next wandb_log (which evaluate
    mode never calls), are appended to that folder's capture file. Returns it, or None."""
    # the constants live with the reader; it imports nothing heavy
    from mcp_rl.evaluation.env_eval import CAPTURED_FILE, CONFIG_FILE

    config = _option(env_args, "--config")
    if mode != "evaluate" or config is None or Path(config).name != CONFIG_FILE:
        return None
    path = Path(config).resolve().parent / CAPTURED_FILE
    install(path)
    original = cls.evaluate
    if getattr(original, _MARK, False):
        return path

    async def evaluate(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = await original(self, *args, **kwargs)
        pending = getattr(self, "eval_metrics", None)
        try:
            if isinstance(pending, dict):
                append_metrics(path, getattr(self, "curr_step", 0), pending)
            elif isinstance(pending, list):
                pairs = [p for p in pending if isinstance(p, tuple | list) and len(p) == 2]
                append_metrics(path, getattr(self, "curr_step", 0), {str(k): v for k, v in pairs})
        except OSError as exc:
            log.warning("could not record evaluation metrics to %s: %s", path, exc)
        return result

    setattr(evaluate, _MARK, True)
    cls.evaluate = evaluate
    return path


def _option(args: Sequence[str], name: str) -> str | None:
    for i, arg in enumerate(args):
        if arg == name and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    return None
