"""What an Atropos environment reports, however its author wrote it, read through the Atropos hooks
(`atropos_hooks`, the one module that patches Atropos, with its one marker), and the file it is
written to. Installed in the environment process by the runner (`mcp_rl.environments.runner`); a
second install changes nothing.

A run's environment (`serve --config runs/<id>/run.yaml`): every `BaseEnv.wandb_log` call also
appends its numbers to the run's `env_metrics.jsonl` (mcp_rl.environments.env_metrics' format), since
Atropos hands its measures to W&B only.

An evaluation mcp-rl runs (Atropos's `evaluate` mode with the config `evaluate.yaml` that
mcp_rl.proof.env_eval writes): the environment's evaluation is read in each of the ways the
public Atropos environments report one, each line of `captured_metrics.jsonl` tagged with its
`Source`:

    evaluate_log   the `metrics` given to `BaseEnv.evaluate_log` (its `samples` Atropos writes to
                   samples.jsonl itself: the per-item outcomes, read by env_eval)
    eval_metrics   a `self.eval_metrics` left when evaluate() returns: (name, value) pairs or dicts
    returned       the dict evaluate() returns (or the first dict of a tuple it returns)
    wandb_log      what reaches `BaseEnv.wandb_log`: after evaluate() returns it is called once with
                   `{}`, as Atropos would at the next step, so an override that reports a score kept
                   in its own attribute and calls `super().wandb_log(metrics)` is heard
    wandb.log      what the environment hands to `wandb.log` directly (W&B itself is a no-op run
                   here, WANDB_MODE=disabled: no network, no key; the evaluation's config turns
                   `use_wandb` on so reports guarded by it or by `wandb.run` are made)

and, once evaluate() returns, the size of the instance's eval split when it has one (`eval_split`
lines; see `eval_split_sizes`). Which metric stands for the evaluation: `choose_metric` (METRIC_RULE), here beside the file it
reads, used by mcp_rl.proof.env_eval and by the validator.

atroposlib and wandb are imported inside the install functions (the environment process has them).
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import time
from collections.abc import Mapping, Sequence
from enum import StrEnum
from pathlib import Path
from typing import Any

from mcp_rl.environments import atropos_hooks
from mcp_rl.environments.env_metrics import append_metrics, numeric_metrics
from mcp_rl.rundir import ENV_METRICS_FILE, RUN_FILE, read_jsonl

log = logging.getLogger(__name__)

CAPTURED_FILE = "captured_metrics.jsonl"
EVALUATE_CONFIG_FILE = "evaluate.yaml"  # the evaluate mode's config, written by env_eval
SPLIT_SOURCE = "eval_split"
METRICS_FILE = "metrics.json"  # BaseEnv.evaluate_log writes its metrics there (data_dir_to_save_evals)
SAMPLES_FILE = "samples.jsonl"  # ... and its per-item samples there
# A per-item sample's score, under the first of these names every sample carries (a bool counts as
# 0/1): read by mcp_rl.proof.env_eval (the held-out outcomes) and the validator's probes.
SCORE_KEYS = ("score", "correct", "is_correct", "reward", "accuracy", "acc", "passed", "success")
# The rule for the metric of an aggregate-only evaluation, tier by tier (a name is matched
# lower-cased; its last `/` part for `exact` and `suffix`): the first tier with a candidate wins;
# within a tier, names holding an `eval` or `test` word first, then by source (Source's order),
# then by name. A candidate is a value in [0, 1] (a proportion: a count or a 0-100 percentage is
# not compared as one) whose name has none of the words of NOT_A_SCORE.
METRIC_RULE: tuple[tuple[str, str], ...] = (
    ("full", "eval/percent_correct"),
    ("suffix", "percent_correct"),
    ("exact", "accuracy"),
    ("exact", "acc"),
    ("contains", "accuracy"),
    ("contains", "acc"),
    ("contains", "correct"),
    ("contains", "pass"),
    ("contains", "success"),
    ("contains", "score"),
    ("contains", "reward"),
)
NOT_A_SCORE = frozenset(
    "std stderr var variance min max count total num n time seconds secs length lengths len tokens".split()
)
# Instance attributes never taken for an eval split: Atropos's own bookkeeping, and what an
# evaluation produces rather than plays (its scores, metrics, results).
_NOT_SPLITS = ("eval_metrics", "eval_workers", "eval_runner", "eval_handling")
_NOT_SPLIT_WORDS = ("score", "metric", "result", "reward", "correct", "worker", "runner")


class Source(StrEnum):
    """Where a reported metric came from, in the order the reader prefers them."""

    EVALUATE_LOG = "evaluate_log"
    EVAL_METRICS = "eval_metrics"
    RETURNED = "returned"
    WANDB_LOG = "wandb_log"
    WANDB = "wandb.log"

    def describe(self) -> str:
        return {
            Source.EVALUATE_LOG: "the metrics given to evaluate_log",
            Source.EVAL_METRICS: "self.eval_metrics left by evaluate()",
            Source.RETURNED: "the dict evaluate() returned",
            Source.WANDB_LOG: "the metrics handed to wandb_log",
            Source.WANDB: "the metrics handed to wandb.log",
        }[self]


class _Sinks:
    """Where this process's hooks write (set by the install functions)."""

    run_metrics: Path | None = None
    evaluation: Path | None = None


def _write_line(path: Path, row: dict[str, Any]) -> None:
    # One write of a whole line: a reader sees complete lines or an unterminated tail.
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(row) + "\n")


def record(source: Source, metrics: Any, step: int = 0) -> None:
    """Append the numbers of one report to the evaluation's capture file (no-op outside one)."""
    path = _Sinks.evaluation
    if path is None or not isinstance(metrics, Mapping):
        return
    numbers = numeric_metrics(dict(metrics))
    if not numbers:
        return
    try:
        _write_line(path, {"source": source.value, "step": int(step), "time": time.time(), "metrics": numbers})
    except OSError as exc:  # capture must never take the environment down
        log.warning("could not record evaluation metrics to %s: %s", path, exc)


def pending_eval_metrics(pending: Any) -> dict[str, Any]:
    """A `self.eval_metrics` as one dict: a list of (name, value) pairs or of dicts, or a dict."""
    if isinstance(pending, Mapping):
        return dict(pending)
    out: dict[str, Any] = {}
    if isinstance(pending, list | tuple):
        for entry in pending:
            if isinstance(entry, Mapping):
                out.update(entry)
            elif isinstance(entry, list | tuple) and len(entry) == 2 and isinstance(entry[0], str):
                out[entry[0]] = entry[1]
    return out


def returned_metrics(result: Any) -> Mapping[str, Any] | None:
    """The dict evaluate() returned: itself, or the first dict of a tuple/list it returned
    (`return metrics, results` is common)."""
    if isinstance(result, Mapping):
        return result
    if isinstance(result, tuple | list):
        return next((r for r in result if isinstance(r, Mapping)), None)
    return None


def eval_split_sizes(instance: Any) -> dict[str, int]:
    """Sizes of the instance's attributes that look like an eval split: a name holding `eval` or
    `test` (not Atropos's bookkeeping, nor a name holding score, metric, result, reward, correct)
    and a sized, non-text, non-mapping value."""
    found: dict[str, int] = {}
    for name, value in sorted(vars(instance).items()):
        lowered = name.lower()
        if name in _NOT_SPLITS or not ("eval" in lowered or "test" in lowered):
            continue
        if any(word in lowered for word in _NOT_SPLIT_WORDS):
            continue
        if isinstance(value, str | bytes | Mapping) or not hasattr(value, "__len__"):
            continue
        try:
            size = len(value)
        except TypeError:
            continue
        if size > 0:
            found[name] = size
    return found


def _to_run_and_capture(env: Any, metrics: dict[str, Any]) -> None:
    """What reached BaseEnv.wandb_log: to the run's env_metrics.jsonl and the evaluation's capture."""
    step = getattr(env, "curr_step", 0)
    if _Sinks.run_metrics is not None:
        try:
            append_metrics(_Sinks.run_metrics, step, metrics)
        except OSError as exc:
            log.warning("could not record environment metrics to %s: %s", _Sinks.run_metrics, exc)
    record(Source.WANDB_LOG, metrics, step)


def _evaluate_log_reported(env: Any, metrics: dict[str, Any]) -> None:
    record(Source.EVALUATE_LOG, metrics, getattr(env, "curr_step", 0))


def _install_wandb() -> None:
    # W&B stays offline in an evaluation: any wandb.init the environment makes is a no-op run
    # (no network, no key, no files), and one is started so `wandb.run is not None` guards pass.
    os.environ["WANDB_MODE"] = "disabled"
    try:
        # wandb is heavy and optional: an environment that imports it brings it
        import wandb
    except ImportError:
        return
    if wandb.run is None:
        wandb.init(mode="disabled")
    atropos_hooks.before_wandb_dot_log(wandb, lambda data: record(Source.WANDB, data))


async def _evaluate_returned(env: Any, result: Any) -> None:
    """What an evaluate() left behind: its returned dict, its `self.eval_metrics`, its eval split's
    size, and whatever its wandb_log reports when called once more."""
    step = getattr(env, "curr_step", 0)
    record(Source.RETURNED, returned_metrics(result), step)
    # Read before the wandb_log call below: an override that reports them clears the list.
    record(Source.EVAL_METRICS, pending_eval_metrics(getattr(env, "eval_metrics", None)), step)
    sizes = eval_split_sizes(env)
    if sizes and _Sinks.evaluation is not None:
        try:
            _write_line(_Sinks.evaluation, {"source": SPLIT_SOURCE, "sizes": sizes})
        except OSError as exc:
            log.warning("could not record the eval split to %s: %s", _Sinks.evaluation, exc)
    try:
        # A score kept in the environment's own attribute reaches a report only when Atropos
        # calls wandb_log at its next step, which evaluate mode never has: called once here.
        await env.wandb_log({})
    except Exception as exc:  # the environment's own code: its evaluation is already done
        log.warning("the environment's wandb_log({}) after evaluate() raised %s: %s", type(exc).__name__, exc)


def _install_evaluation_hooks(cls: Any) -> None:
    atropos_hooks.after_wandb_log(_to_run_and_capture)
    atropos_hooks.before_evaluate_log(_evaluate_log_reported)
    _install_wandb()
    atropos_hooks.after_evaluate(cls, _evaluate_returned)


# --- reading what was captured ----------------------------------------------------------------
def numbers_of(row: Mapping[str, Any]) -> dict[str, float]:
    """The finite numbers of a report, without the capture's own `step` and `time`."""
    out = {}
    for key, value in row.items():
        if isinstance(value, bool) or not isinstance(value, int | float):
            continue
        if math.isfinite(float(value)):
            out[str(key)] = float(value)
    for key in ("step", "time"):
        out.pop(key, None)
    return out


def read_reports(out_dir: Path) -> tuple[list[tuple[Source, dict[str, float]]], dict[str, int]]:
    """The reports captured in `out_dir` in Source order (each source's calls merged, later calls
    winning), and the eval-split sizes seen."""
    merged: dict[Source, dict[str, float]] = {}
    sizes: dict[str, int] = {}
    for row in read_jsonl(out_dir / CAPTURED_FILE).rows:
        if row.get("source") == SPLIT_SOURCE and isinstance(row.get("sizes"), dict):
            sizes.update({str(k): int(v) for k, v in row["sizes"].items() if isinstance(v, int)})
            continue
        try:
            source = Source(str(row.get("source")))
        except ValueError:
            continue
        if isinstance(row.get("metrics"), dict):
            merged.setdefault(source, {}).update(numbers_of(row["metrics"]))
    try:
        data = json.loads((out_dir / METRICS_FILE).read_text(encoding="utf-8"))
        logged = numbers_of(((data.get("results") or {}).get("all")) or {})
        merged[Source.EVALUATE_LOG] = {**logged, **merged.get(Source.EVALUATE_LOG, {})}
    except (OSError, ValueError, AttributeError):
        pass
    return [(source, merged[source]) for source in Source if merged.get(source)], sizes


def _words(name: str) -> list[str]:
    return [w for w in re.split(r"[^a-z0-9]+", name.lower()) if w]


def _tier_match(kind: str, pattern: str, name: str) -> bool:
    lowered = name.lower()
    last = lowered.rsplit("/", 1)[-1]
    if kind == "full":
        return lowered == pattern
    if kind == "suffix":
        return last.endswith(pattern)
    if kind == "exact":
        return last == pattern
    return pattern in lowered


def choose_metric(
    reports: list[tuple[Source, dict[str, float]]], named: str | None = None
) -> tuple[str, float, Source] | None:
    """(name, value, source) of the metric that stands for the evaluation: `named` (exactly, or
    as the last `/` part of a reported name) when given, else the first by METRIC_RULE."""
    if named is not None:
        for exact in (True, False):
            for source, metrics in reports:
                for name in sorted(metrics):
                    if name == named if exact else name.rsplit("/", 1)[-1] == named:
                        return name, metrics[name], source
        return None
    order = {source: i for i, source in enumerate(Source)}
    candidates = [
        (name, value, source)
        for source, metrics in reports
        for name, value in metrics.items()
        if 0.0 <= value <= 1.0 and not NOT_A_SCORE.intersection(_words(name))
    ]
    for kind, pattern in METRIC_RULE:
        tier = [c for c in candidates if _tier_match(kind, pattern, c[0])]
        if tier:
            return min(tier, key=lambda c: (not {"eval", "test"} & set(_words(c[0])), order[c[2]], c[0]))
    return None


def install_for_run(mode: str, env_args: Sequence[str]) -> Path | None:
    """A run's environment (`serve --config runs/<id>/run.yaml`): its wandb_log calls also go to
    the run's env_metrics.jsonl. Returns that file, or None (smoke tests, other modes)."""
    config = _option(env_args, "--config")
    if mode != "serve" or config is None or Path(config).name != RUN_FILE:
        return None
    _Sinks.run_metrics = Path(config).resolve().parent / ENV_METRICS_FILE
    atropos_hooks.after_wandb_log(_to_run_and_capture)
    return _Sinks.run_metrics


def install_for_evaluate(cls: Any, mode: str, env_args: Sequence[str]) -> Path | None:
    """Atropos's `evaluate` mode started by mcp-rl (its config `evaluate.yaml` in the
    evaluation's folder): every way above of reporting goes to that folder's capture file.
    Returns it, or None."""
    config = _option(env_args, "--config")
    if mode != "evaluate" or config is None or Path(config).name != EVALUATE_CONFIG_FILE:
        return None
    _Sinks.evaluation = Path(config).resolve().parent / CAPTURED_FILE
    _install_evaluation_hooks(cls)
    return _Sinks.evaluation


def install_for_check(cls: Any, folder: Path) -> Path:
    """The validator's run of an environment (validate_atropos): the evaluation hooks, writing to
    `folder`'s capture file. Returns it."""
    _Sinks.evaluation = folder / CAPTURED_FILE
    _install_evaluation_hooks(cls)
    return _Sinks.evaluation


def _option(args: Sequence[str], name: str) -> str | None:
    for i, arg in enumerate(args):
        if arg == name and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    return None
