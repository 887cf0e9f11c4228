"""An Atropos environment's own evaluate() as held-out proof: the environment, unchanged, run in
Atropos's `evaluate` mode (`setup()` then `evaluate()`) in a child process against a model
served over HTTP (the trainer's inference server during a run; a checkpoint served by the
evaluation worker afterwards), its results read back from what it reports.

What an environment reports (captured in the environment process by
mcp_rl.environments.eval_capture, the one owner of those hooks), in the order it is used:

    per item   the `samples` it passes to `BaseEnv.evaluate_log(metrics, samples=...)` (Atropos
               writes them to `samples.jsonl`): one dict per eval item with a score under one of
               SCORE_KEYS (`score`, `correct`, `reward`, ...) and, to pair items across
               evaluations, an id under one of ID_KEYS (`id`, `question`, `prompt`, ...) or its
               `messages`. These give per-item outcomes and the paired test.
    aggregate  one metric of what it reported otherwise, by source in this order: the metrics it
               gives evaluate_log, a `self.eval_metrics` left when evaluate() returns, the dict
               evaluate() returns, what reaches `wandb_log` (called once after evaluate(), so an
               override reporting a score of its own attribute through `super().wandb_log` is
               heard), what it hands to `wandb.log`. The metric is the one the run names
               (`eval_metric`), else the first by METRIC_RULE (see `choose_metric`); n is an
               `n`-like metric of the same report, else the size of the instance's eval split
               (`self.eval_*` / `self.test*`, one size). These give an unpaired comparison only.

The documented hook, for an environment that would rather hand mcp-rl its eval items than run
its own evaluate(), is the same `samples` list: nothing from mcp-rl is imported either way.
"""

from __future__ import annotations

import ast
import hashlib
import math
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from mcp_rl.environments.constant_answers import SAMPLE_KEY as CONSTANTS_KEY
from mcp_rl.environments.constant_answers import normalised
from mcp_rl.environments.eval_capture import (
    CAPTURED_FILE,
    EVALUATE_CONFIG_FILE,
    METRIC_RULE,
    METRICS_FILE,
    SAMPLES_FILE,
    SCORE_KEYS,
    Source,
    choose_metric,
    read_reports,
)
from mcp_rl.processes import identify, spawn, stop_group
from mcp_rl.proof.outcomes import ItemOutcome
from mcp_rl.proof.verdict import last_user_text, repeats_prompt
from mcp_rl.rundir import read_jsonl

CONFIG_FILE = EVALUATE_CONFIG_FILE
NO_SCORE_FILE = "no_score.txt"  # why an evaluation gave no figures, with what it reported (the note shows it)
LOG_FILE = "evaluate.log"
# A score per sample, under the first of SCORE_KEYS every sample carries (a bool counts as 0/1).
# An id per sample (to pair items across evaluations), under the first of these every sample has
# with distinct values; else the prompt text of its `messages`; else its position.
ID_KEYS = ("id", "item_id", "uid", "idx", "index", "question", "prompt", "problem", "input", "query")
# A label per sample (a mixture's dataset): held-out figures are also given per label.
GROUP_KEYS = ("dataset", "group", "category", "task", "subset")
COMPLETION_KEYS = ("completion", "response", "model_response", "output", "generation", "answer_text")
# Whether a sample's generation stopped at max_tokens: a finish reason ("length" = cut), else a flag.
FINISH_KEYS = ("finish_reason", "stop_reason")
CUT_KEYS = ("truncated", "at_limit", "hit_max_tokens")
# The prompt a sample's answer may repeat (prompt echo): its messages' last user turn, else one of these.
PROMPT_KEYS = ("question", "prompt", "problem", "input", "query")
N_KEYS = ("n", "eval/n", "num_samples", "eval/num_samples", "total", "eval/total", "total_evaluated", "count")
DEFAULT_TIMEOUT_S = 1800.0
STOP_GRACE_S = 5.0


class EnvEvaluateError(RuntimeError):
    """The environment's evaluate() failed or reported nothing usable (the message says which)."""


def defines_evaluate(file_path: Path, class_name: str) -> bool | None:
    """Whether the class (or a base defined in the same file) overrides evaluate(), read from
    the source without importing it. None: a base from elsewhere may define it (unknown)."""
    try:
        tree = ast.parse(Path(file_path).read_text(encoding="utf-8"))
    except OSError:
        return False  # no file, nothing to run
    except (SyntaxError, UnicodeDecodeError):
        return None
    classes = {n.name: n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)}
    seen: set[str] = set()
    todo = [class_name]
    unknown = False
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        node = classes.get(name)
        if node is None:
            if name not in ("BaseEnv", "object"):
                unknown = True
            continue
        for item in node.body:
            if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef) and item.name == "evaluate":
                return True
        for base in node.bases:
            if isinstance(base, ast.Name):
                todo.append(base.id)
            elif isinstance(base, ast.Attribute):
                todo.append(base.attr)
    return None if unknown else False


def uses_own_evaluate(name: str, file_path: Path, class_name: str) -> bool:
    """Whether a run of this environment is evaluated by its own evaluate() (no items of ours):
    an Atropos environment whose class defines one (a base class from another module that may
    define it counts when the file uses atroposlib at all)."""
    if name in ("arithmetic", "gsm8k"):
        return False
    found = defines_evaluate(file_path, class_name)
    if found is None:
        try:
            return "atroposlib" in Path(file_path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            return False
    return found


def what_to_add(name: str, class_name: str, file_path: Path) -> str:
    """What an environment with no way to be evaluated needs, exactly."""
    return (
        f"environment {name!r} ({class_name} in {file_path}) has no evaluate() of its own and no held-out items "
        "mcp-rl knows. Add an eval split (items never trained on) and, in the class, "
        "`async def evaluate(self, *args, **kwargs)` that answers each eval item greedily through self.server and "
        "ends with `await self.evaluate_log(metrics={'eval/percent_correct': accuracy}, samples=[{'id': <item id>, "
        "'score': <0..1>, 'response': <text>}, ...])` (one sample per item; nothing to import from mcp-rl). mcp-rl "
        "then runs it against the base before step 1 and the trained model after the last step, pairs the items by "
        "id for McNemar's test, and rl_evaluate_checkpoint uses it too."
    )


@dataclass
class EnvEvaluation:
    """What one run of the environment's evaluate() reported."""

    outcomes: list[ItemOutcome] | None  # per item, when its samples carry scores
    score: float | None  # the mean of the outcomes, else the headline metric
    score_key: str | None  # which metric (or sample field) the score is
    n: int | None  # items evaluated, when known
    metrics: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0
    paired_by: str | None = None  # how items are matched across evaluations (an ID_KEYS name...)
    source: str | None = None  # where the score came from, in words
    n_source: str | None = None  # where n came from, in words

    def measure(self) -> str:
        """What the figure is and where it came from, in words (the note shows it)."""
        n = f"; n = {self.n} ({self.n_source})" if self.n else "; n unknown"
        return f"{self.score_key} from {self.source}{n}"

    def summary(self) -> dict[str, Any]:
        return {
            "score": self.score,
            "score_key": self.score_key,
            "source": self.source,
            "n": self.n,
            "n_source": self.n_source,
            "per_item": self.outcomes is not None,
            "paired_by": self.paired_by,
            "metrics": self.metrics,
            "seconds": round(self.seconds, 3),
        }


def evaluate_config(
    run_yaml: Mapping[str, Any], out_dir: Path, base_url: str, model_name: str | None
) -> dict[str, Any]:
    """The `evaluate` mode's YAML: the run's env section (its eval results into `out_dir`) and its
    server list pointed at `base_url`. `use_wandb` is on so that reports an environment guards
    with it are made: the capture hooks keep W&B a no-op there (eval_capture)."""
    env = dict(run_yaml.get("env") or {})
    env["data_dir_to_save_evals"] = str(out_dir)
    env["use_wandb"] = True
    servers = []
    for server in run_yaml.get("openai") or [{}]:
        updated = dict(server, base_url=base_url)
        if model_name:
            updated["model_name"] = model_name
        servers.append(updated)
    return {"env": env, "openai": servers}


def run_environment_evaluate(
    *,
    file_path: Path,
    class_name: str,
    project_root: Path,
    run_yaml: Mapping[str, Any],
    base_url: str,
    out_dir: Path,
    child_env: Mapping[str, str],
    model_name: str | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    metric: str | None = None,
) -> EnvEvaluation:
    """Run the environment's evaluate() against `base_url` (blocking, up to `timeout_s`) and read
    what it reported. Raises EnvEvaluateError with the cause (its log's tail) when it fails."""
    out_dir.mkdir(parents=True, exist_ok=True)
    for name in (SAMPLES_FILE, METRICS_FILE, CAPTURED_FILE, NO_SCORE_FILE):
        (out_dir / name).unlink(missing_ok=True)  # a retried evaluation never reads an older one
    config_path = out_dir / CONFIG_FILE
    config_path.write_text(yaml.safe_dump(evaluate_config(run_yaml, out_dir, base_url, model_name)), encoding="utf-8")
    argv = [
        sys.executable,
        "-m",
        "mcp_rl.environments.runner",
        str(file_path),
        class_name,
        "--project-root",
        str(project_root),
        "evaluate",
        "--config",
        str(config_path),
    ]
    began = time.monotonic()
    log_path = out_dir / LOG_FILE
    proc = spawn(argv, log_path, child_env, cwd=project_root)
    ident = identify(proc.pid)
    try:
        code = proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        stop_group(proc.pid, ident.pgid if ident else proc.pid, ident.create_time if ident else None, STOP_GRACE_S)
        raise EnvEvaluateError(
            f"the environment's evaluate() did not finish in {timeout_s:.0f} s (stopped); see {log_path}"
        ) from None
    seconds = time.monotonic() - began
    if code != 0:
        raise EnvEvaluateError(f"the environment's evaluate() exited with code {code}: {_tail(log_path)}")
    try:
        result = read_evaluation(out_dir, metric)
    except EnvEvaluateError as exc:
        (out_dir / NO_SCORE_FILE).write_text(str(exc), encoding="utf-8")
        raise
    result.seconds = seconds
    return result


def _tail(path: Path, chars: int = 600) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return f"(no log at {path})"
    lines = [line for line in text.splitlines() if line.strip()]
    return " | ".join(lines[-6:])[-chars:] or f"(empty log {path})"


def read_evaluation(out_dir: Path, metric: str | None = None) -> EnvEvaluation:
    """What an evaluate() run wrote into `out_dir` (raises EnvEvaluateError when nothing usable,
    listing what was reported). `metric`: the one the user named (config `eval_metric`)."""
    samples = [row for row in read_jsonl(out_dir / SAMPLES_FILE).rows if isinstance(row, dict)]
    reports, split_sizes = read_reports(out_dir)
    metrics: dict[str, float] = {}
    for _, numbers in reversed(reports):
        metrics.update(numbers)  # the preferred source's value wins a shared name
    outcomes, key, paired_by = per_item_outcomes(samples) if metric is None else (None, None, None)
    if outcomes:
        scores = [o.score for o in outcomes]
        return EnvEvaluation(
            outcomes=outcomes,
            score=sum(scores) / len(scores),
            score_key=key,
            n=len(outcomes),
            metrics=metrics,
            paired_by=paired_by,
            source=f"the per-item samples given to evaluate_log (field {key!r}, paired by {paired_by})",
            n_source="the samples",
        )
    chosen = choose_metric(reports, metric)
    if chosen is None:
        raise EnvEvaluateError(_nothing_found(reports, samples, metric))
    name, value, source = chosen
    n, n_source = _n_of(reports, source, samples, split_sizes)
    return EnvEvaluation(
        outcomes=None,
        score=value,
        score_key=name,
        n=n,
        metrics=metrics,
        source=source.describe(),
        n_source=n_source,
    )


def _n_of(
    reports: list[tuple[Source, dict[str, float]]],
    source: Source,
    samples: list[dict[str, Any]],
    split_sizes: dict[str, int],
) -> tuple[int | None, str | None]:
    """n of an aggregate and where it came from: its report's `n`-like metric, else the samples'
    count, else the instance's eval split when its candidates agree on one size."""
    same = dict(reports).get(source, {})
    found = _n_metric(same)
    if found is not None:
        return found[1], f"{found[0]!r} in {source.describe()}"
    if samples:
        return len(samples), "the samples given to evaluate_log"
    sizes = set(split_sizes.values())
    if len(sizes) == 1:
        names = ", ".join(f"self.{name}" for name in sorted(split_sizes))
        return sizes.pop(), f"the size of the environment's eval split ({names})"
    return None, None


def _nothing_found(
    reports: list[tuple[Source, dict[str, float]]], samples: list[dict[str, Any]], named: str | None
) -> str:
    seen = "; ".join(f"{source.describe()}: {', '.join(sorted(metrics))}" for source, metrics in reports)
    if samples:
        fields = sorted({k for row in samples for k in row})[:20]
        seen = f"{seen}; samples without a common score field (fields: {', '.join(fields)})".lstrip("; ")
    seen = seen or "nothing (no evaluate_log, eval_metrics, returned dict, wandb_log or wandb.log numbers)"
    if named is not None:
        return (
            f"the metric {named!r} (config eval_metric) was not reported by the environment's evaluate(). Seen: {seen}"
        )
    rule = ", ".join(p for _, p in METRIC_RULE)
    return (
        "the environment's evaluate() reported no accuracy-like score (a value in [0, 1] named like one of: "
        f"{rule}). Seen: {seen}. Name the metric to use with rl_edit_config('eval_metric', <name>), or pass "
        "per-item `samples` (each with a `score`) to self.evaluate_log(...)"
    )


def _n_metric(metrics: Mapping[str, float]) -> tuple[str, int] | None:
    for key in N_KEYS:
        value = metrics.get(key)
        if value is not None and value >= 1 and float(value).is_integer():
            return key, int(value)
    return None


def _score(value: Any) -> float | None:
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if isinstance(value, int | float) and math.isfinite(float(value)):
        return float(value)
    return None


def _prompt_text(messages: Any) -> str | None:
    if not isinstance(messages, list) or not messages:
        return None
    parts = [m for m in messages if isinstance(m, dict)]
    while parts and parts[-1].get("role") == "assistant":
        parts = parts[:-1]
    text = "\n".join(f"{m.get('role')}: {m.get('content')}" for m in parts)
    return text or None


def _completion(row: Mapping[str, Any]) -> str:
    for key in COMPLETION_KEYS:
        if isinstance(row.get(key), str):
            return str(row[key])
    messages = row.get("messages")
    if isinstance(messages, list) and messages and isinstance(messages[-1], dict):
        if messages[-1].get("role") == "assistant":
            return str(messages[-1].get("content") or "")
    return ""


def per_item_outcomes(samples: list[dict[str, Any]]) -> tuple[list[ItemOutcome] | None, str | None, str | None]:
    """(outcomes, score field, id field) of an environment's samples; (None, None, None) when they
    carry no common score field."""
    if not samples:
        return None, None, None
    key = next((k for k in SCORE_KEYS if all(_score(row.get(k)) is not None for row in samples)), None)
    if key is None:
        return None, None, None
    ids: list[str] | None = None
    paired_by: str | None = None
    for name in ID_KEYS:
        values = [row.get(name) for row in samples]
        if all(v is not None and not isinstance(v, dict | list) for v in values):
            texts = [str(v)[:300] for v in values]
            if len(set(texts)) == len(texts):
                ids, paired_by = texts, name
                break
    if ids is None:
        prompts = [_prompt_text(row.get("messages")) for row in samples]
        if all(prompts) and len(set(prompts)) == len(prompts):
            ids = ["prompt-" + hashlib.sha1(str(p).encode()).hexdigest()[:16] for p in prompts]
            paired_by = "messages"
    if ids is None:
        ids, paired_by = [f"item-{i}" for i in range(len(samples))], "position"
    group_key = next((k for k in GROUP_KEYS if all(isinstance(row.get(k), str) for row in samples)), None)
    outcomes = []
    for item, row in zip(ids, samples, strict=True):
        completion = _completion(row)
        prompt = _prompt_of(row)
        outcomes.append(
            ItemOutcome(
                item=item,
                score=float(_score(row.get(key)) or 0.0),
                completion=completion,
                group=row[group_key] if group_key else None,
                at_limit=_at_limit(row),
                echo=repeats_prompt(completion, prompt) if prompt is not None else None,
                constants=_constants(row),
            )
        )
    return outcomes, key, paired_by


def _constants(row: Mapping[str, Any]) -> dict[str, float] | None:
    """The sample's graded constant answers ({answer: its score on this item}), when it carries
    them as numbers (mcp_rl.environments.constant_answers); None otherwise."""
    given = row.get(CONSTANTS_KEY)
    if not isinstance(given, dict) or not given:
        return None
    out: dict[str, float] = {}
    for answer, score in given.items():
        value = _score(score)
        if not isinstance(answer, str) or value is None:
            return None
        out[normalised(answer)] = float(value)
    return out


def _at_limit(row: Mapping[str, Any]) -> bool | None:
    """Whether the sample's generation stopped at max_tokens, when the sample says (None: it does not)."""
    for key in FINISH_KEYS:
        if isinstance(row.get(key), str):
            return str(row[key]) == "length"
    for key in CUT_KEYS:
        if isinstance(row.get(key), bool):
            return bool(row[key])
    return None


def _prompt_of(row: Mapping[str, Any]) -> str | None:
    messages = row.get("messages")
    if isinstance(messages, list):
        text = last_user_text([m for m in messages if isinstance(m, dict)])
        if text:
            return text
    for key in PROMPT_KEYS:
        if isinstance(row.get(key), str):
            return str(row[key])
    return None
