"""Capture of what an Atropos environment logs, into `runs/<id>/env_metrics.jsonl`.

Atropos environments report their own measures (percent correct, eval results, completion
lengths) only through `BaseEnv.wandb_log`, and only to W&B: with W&B off they are computed and
thrown away. Inside the environment process, the hook of `mcp_rl.environments.eval_capture`
(the one owner of the Atropos hooks) makes every `BaseEnv.wandb_log` call also append the
numbers to a JSONL file with `append_metrics`, one line per call: `{"step": <env step = trainer step>, "time": ..., "train/percent_correct": ..., ...}` with
the keys as the environment names them (without the W&B prefix). The results service merges
them with the trainer's metrics by step.

This module owns the file's line format; it imports nothing heavy.
"""

from __future__ import annotations

import json
import math
import numbers
import time
from pathlib import Path
from typing import Any

from mcp_rl.rundir import STEP_KEY, TIME_KEY


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
