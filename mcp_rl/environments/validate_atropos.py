"""The validator's run of an Atropos environment (in validate_child's process): the environment,
unchanged, made from its own `config_init()` and run for real against a model over HTTP: the
local base model served by `mcp_rl.trainer.serve_model` in a child of this process (or, for
tests, any OpenAI-compatible server given by its URL).

    setup()                 once, timed; whatever raises is reported with its file and line
    get_next_item()         ITEMS times
    collect_trajectories()  one group (the environment's group_size, at most GROUP_CAP) on the
                            first item: an exception (e.g. score() raising) with file and line,
                            non-finite scores (a problem), identical scores (a warning: no signal
                            to learn from), the time per group
    evaluate()              on at most EVAL_ITEMS items of its eval split (the split's list is
                            shortened when it can be read, see eval_capture.eval_split_sizes),
                            with the capture hooks of eval_capture: whether it runs and which
                            score mcp-rl would read from it, and from where
    degenerate replies      evaluate() again, on at most degenerate_probes.PROBE_ITEMS items,
                            against a loopback server answering every request with one probe's
                            reply (empty, a digit string, the prompt echoed, the most common
                            reference answer its samples carry): what each scores, warned past
                            the thresholds of mcp_rl.environments.degenerate_probes (scores taken
                            as accuracy-like, 0..1)

Every step has its deadline. Bounds keep it inside the validator's budget: the environment's
max_token_length is capped at MAX_TOKENS (its generations are the slow part on a CPU).
"""

from __future__ import annotations

import asyncio
import ctypes
import json
import math
import signal
import subprocess
import sys
import time
import traceback
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mcp_rl.environments import degenerate_probes, eval_capture
from mcp_rl.ports import allocate_ports

ITEMS = 3
GROUP_CAP = 4
EVAL_ITEMS = 4
MAX_TOKENS = 256
SERVER_READY_S = 180.0
SETUP_S = 120.0
GROUP_S = 180.0
EVALUATE_S = 150.0


def where(exc: BaseException, file_path: Path) -> dict[str, Any]:
    """The exception and the innermost line of the user's file it passed through (else the
    innermost line at all)."""
    cause = _unwrapped(exc)
    frames = traceback.extract_tb(exc.__traceback__) + (
        traceback.extract_tb(cause.__traceback__) if cause is not exc else []
    )
    own = [f for f in frames if Path(f.filename).resolve() == file_path]
    frame = own[-1] if own else (frames[-1] if frames else None)
    return {
        "exception": f"{type(cause).__name__}: {cause}"[:500],
        "file": frame.filename if frame else str(file_path),
        "line": frame.lineno if frame else None,
    }


def _unwrapped(exc: BaseException) -> BaseException:
    """Atropos retries server calls with tenacity: its RetryError hides the error of the last
    attempt (a refused request, a timeout), which is what the user needs to read."""
    for _ in range(5):
        attempt = getattr(exc, "last_attempt", None)
        inner = attempt.exception() if attempt is not None and callable(getattr(attempt, "exception", None)) else None
        if not isinstance(inner, BaseException):
            return exc
        exc = inner
    return exc


class Findings:
    """What the run found: problems (with exception, file, line), warnings, facts."""

    def __init__(self, file_path: Path) -> None:
        self.file_path = file_path
        self.problems: list[dict[str, Any]] = []
        self.warnings: list[str] = []
        self.facts: dict[str, Any] = {}

    def problem(self, check: str, message: str, exc: BaseException | None = None) -> None:
        entry: dict[str, Any] = {"check": check, "message": message}
        if exc is not None:
            entry.update(where(exc, self.file_path))
            entry["message"] = f"{message}: {entry['exception']} at {Path(entry['file']).name}:{entry['line']}"
        self.problems.append(entry)


def _die_with_parent() -> None:
    # The served model must not outlive this validator (whatever ends it): Linux's parent-death signal.
    try:
        ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


class LocalModel:
    """The local base model served on 127.0.0.1 by a child of this process (stopped on exit)."""

    def __init__(self, model_dir: str, log_path: Path) -> None:
        (self.port,) = allocate_ports(1)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self.log_path = log_path
        with open(log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "mcp_rl.trainer.serve_model", "--model", model_dir, "--port", str(self.port)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                preexec_fn=_die_with_parent,
            )

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def wait_ready(self, timeout_s: float = SERVER_READY_S) -> str | None:
        """None once it answers /health; else why not (exited, or not ready in time)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return f"the local model server exited ({self.proc.returncode}); see {self.log_path}"
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2) as response:
                    if response.status == 200:
                        return None
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.2)  # polling a starting server, within the deadline above
        return f"the local model server was not ready in {timeout_s:.0f} s; see {self.log_path}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def _config(cls: Any, tokenizer: str, work_dir: Path, findings: Findings, preset: dict[str, Any] | None = None) -> Any:
    """The environment's own config (config_init(), else its config class's defaults), bounded."""
    try:
        config, _ = cls.config_init()
    except Exception as exc:  # the user's code: the run falls back the same way (runner)
        # the runner's fallback: same rule as a run's
        from mcp_rl.environments.runner import fallback_config

        findings.warnings.append(f"config_init() raised {type(exc).__name__}: {exc}; its config class's defaults used")
        config = fallback_config(cls, {"tokenizer_name": tokenizer})
    group = int(getattr(config, "group_size", GROUP_CAP) or GROUP_CAP)
    findings.facts["group_size"] = group
    update = {
        **(preset or {}),  # the selected variant's values (rg:letter_counting's datasets)
        "tokenizer_name": tokenizer,
        "use_wandb": True,  # as in mcp-rl's evaluations: reports guarded by it are made (W&B is a no-op)
        "group_size": min(group, GROUP_CAP),
        "max_token_length": min(int(getattr(config, "max_token_length", MAX_TOKENS) or MAX_TOKENS), MAX_TOKENS),
        "data_dir_to_save_evals": str(work_dir),
        "data_path_to_save_groups": None,
    }
    fields = type(config).model_fields
    return config.model_copy(update={k: v for k, v in update.items() if k in fields})


async def _timed(findings: Findings, check: str, what: str, call: Callable[[], Any], timeout_s: float) -> Any:
    began = time.monotonic()
    try:
        result = await asyncio.wait_for(call(), timeout_s)
    except TimeoutError:
        findings.problem(check, f"{what} did not finish in {timeout_s:.0f} s")
        return _FAILED
    except Exception as exc:  # the user's code: reported with its line
        findings.problem(check, f"{what} raised", exc)
        return _FAILED
    findings.facts[f"{check}_seconds"] = round(time.monotonic() - began, 3)
    return result


_FAILED = object()


def _first_group(result: Any) -> Any:
    group = result[0] if isinstance(result, tuple) and result else result
    if isinstance(group, list):
        group = next((g for g in group if g is not None), None)
    return group


def _check_scores(findings: Findings, group: Any) -> None:
    scores = group.get("scores") if isinstance(group, dict) else None
    if not isinstance(scores, list) or not scores:
        findings.problem("scores", f"collect_trajectories() returned a group without scores ({type(group).__name__})")
        return
    values: list[float] = []
    for value in scores:
        try:
            values.append(float(value))
        except (TypeError, ValueError):
            findings.problem("scores", f"a score is not a number: {value!r}")
            return
    findings.facts["scores"] = values
    bad = [v for v in values if not math.isfinite(v)]
    if bad:
        findings.problem("scores", f"{len(bad)} of {len(values)} scores are not finite ({bad[0]}): a run would stall")
    elif len(set(values)) == 1:
        findings.warnings.append(
            f"every answer of the group scored {values[0]}: a group whose rewards never differ gives no signal to learn "
            "from (GRPO's advantages are all 0); check score() and make the task reachable for the model"
        )


def _shorten_eval_split(env: Any, limit: int = EVAL_ITEMS) -> dict[str, int]:
    """Shorten the instance's eval split(s) to `limit` items (lists, tuples, datasets with select)."""
    kept = {}
    for name, size in eval_capture.eval_split_sizes(env).items():
        value = getattr(env, name)
        if isinstance(value, list | tuple):
            setattr(env, name, value[:limit])
        elif callable(getattr(value, "select", None)):
            try:
                setattr(env, name, value.select(range(min(size, limit))))
            except Exception:  # not a datasets.Dataset after all: left as it is
                continue
        else:
            continue
        kept[name] = min(size, limit)
    return kept


def _probe_scores(work_dir: Path) -> tuple[list[float] | None, list[Any], float | None]:
    """(per-item scores, per-item references, aggregate score) of the evaluate() just run."""
    samples = []
    try:
        with open(work_dir / eval_capture.SAMPLES_FILE, encoding="utf-8") as fh:
            samples = [row for row in map(_json_line, fh) if isinstance(row, dict)]
    except OSError:
        pass
    scores: list[float] | None = None
    references: list[Any] = []
    if samples:
        for key in eval_capture.SCORE_KEYS:
            values = [row.get(key) for row in samples]
            numbers = [float(v) for v in values if isinstance(v, int | float)]  # a bool is an int: 0/1
            if len(numbers) == len(values) and all(math.isfinite(v) for v in numbers):
                scores = numbers
                break
        ref_key = next((k for k in degenerate_probes.REFERENCE_KEYS if all(k in row for row in samples)), None)
        references = [row[ref_key] for row in samples] if ref_key else []
    reports, _ = eval_capture.read_reports(work_dir)
    chosen = eval_capture.choose_metric(reports)
    return scores, references, chosen[1] if chosen is not None else None


def _json_line(line: str) -> Any:
    try:
        return json.loads(line)
    except json.JSONDecodeError:
        return None


def _replier(name: str, constant: str | None) -> Callable[[str], str]:
    def reply(prompt: str) -> str:
        return degenerate_probes.reply_for(name, prompt, constant)

    return reply


async def _probe(findings: Findings, cls: Any, config: Any, work_dir: Path) -> None:
    """evaluate() against a server answering each probe's reply: what degenerate replies score."""
    from atroposlib.envs.base import APIServerConfig  # the environment's own library, already loaded

    with degenerate_probes.ProbeServer() as probe:
        server = APIServerConfig(
            model_name="probe",
            base_url=probe.base_url,
            api_key="x",
            server_type="openai",
            health_check=False,
            timeout=int(EVALUATE_S),
        )
        try:
            env = cls(config=config, server_configs=[server], slurm=False, testing=False)
            await asyncio.wait_for(env.setup(), SETUP_S)
        except Exception as exc:  # it ran above with the model; said, not a problem of its own
            findings.warnings.append(f"degenerate replies not probed: the environment did not start ({exc})"[:300])
            return
        _shorten_eval_split(env, degenerate_probes.PROBE_ITEMS)
        results: list[degenerate_probes.ProbeResult] = []
        constant: str | None = None
        for name in degenerate_probes.PROBES:
            if name == "constant" and constant is None:
                continue
            probe.reply = _replier(name, constant)
            for stale in (eval_capture.CAPTURED_FILE, eval_capture.METRICS_FILE, eval_capture.SAMPLES_FILE):
                (work_dir / stale).unlink(missing_ok=True)
            try:
                await asyncio.wait_for(env.evaluate(), EVALUATE_S)
            except Exception as exc:  # a reply the environment cannot take: said, not fatal
                findings.warnings.append(
                    f"evaluate() raised on {degenerate_probes.DESCRIBED[name]}: {type(exc).__name__}: {exc}"[:300]
                )
                continue
            scores, references, aggregate = _probe_scores(work_dir)
            if constant is None and references:
                constant = degenerate_probes.most_common(references)
            shown = "(each item's own prompt)" if name == "echo" else degenerate_probes.reply_for(name, "", constant)
            if scores:
                results.append(degenerate_probes.result(name, shown, scores))
            elif aggregate is not None:
                results.append(degenerate_probes.ProbeResult(name, shown, None, aggregate, None))
    findings.facts["degenerate_replies"] = [r.report() for r in results]
    findings.warnings.extend(degenerate_probes.warnings(results))


async def _evaluate(findings: Findings, cls: Any, env: Any, work_dir: Path) -> bool:
    """Run evaluate() once; True when it ran (the probes then run it too)."""
    from atroposlib.envs.base import BaseEnv  # the environment's own library, already loaded

    if getattr(cls, "evaluate", None) is BaseEnv.evaluate:
        findings.facts["evaluate"] = {"defined": False}
        findings.warnings.append("no evaluate() of its own: held-out figures need one (or a task's held-out items)")
        return False
    shortened = _shorten_eval_split(env)
    began = time.monotonic()
    done = await _timed(findings, "evaluate", "evaluate()", env.evaluate, EVALUATE_S)
    facts: dict[str, Any] = {"defined": True, "shortened_to": shortened or None}
    if done is _FAILED:
        findings.facts["evaluate"] = facts
        return False
    facts["seconds"] = round(time.monotonic() - began, 3)
    reports, _ = eval_capture.read_reports(work_dir)
    samples = (work_dir / "samples.jsonl").is_file()
    chosen = eval_capture.choose_metric(reports)
    if chosen is not None:
        name, value, source = chosen
        facts.update(metric=name, score=value, source=source.describe())
    elif samples:
        facts.update(source="the per-item samples given to evaluate_log")
    else:
        seen = "; ".join(f"{s.describe()}: {', '.join(sorted(m))}" for s, m in reports) or "nothing"
        findings.warnings.append(
            f"evaluate() ran but reported no score mcp-rl can read (seen: {seen}): held-out figures would be missing; "
            "name the metric with rl_edit_config('eval_metric', ...) or pass samples to evaluate_log"
        )
    if not shortened:
        facts["note"] = "its eval split could not be shortened: evaluate() ran on all of it"
    findings.facts["evaluate"] = facts
    return True


async def run_checks(
    cls: Any,
    file_path: Path,
    *,
    base_url: str,
    tokenizer: str,
    model_name: str,
    server_type: str,
    work_dir: Path,
    preset: dict[str, Any] | None = None,
) -> Findings:
    findings = Findings(file_path)
    # the environment's library (the child imported it with the file)
    from atroposlib.envs.base import APIServerConfig

    # The hooks an evaluation has (W&B a no-op run, every report captured), before anything runs.
    eval_capture.install_for_check(cls, work_dir)
    try:
        config = _config(cls, tokenizer, work_dir, findings, preset)
        server = APIServerConfig(
            model_name=model_name,
            base_url=base_url,
            api_key="x",
            server_type=server_type,
            health_check=False,
            timeout=int(GROUP_S),
        )
        env = cls(config=config, server_configs=[server], slurm=False, testing=False)
    except Exception as exc:  # the user's code (or a config it refuses)
        findings.problem("init", f"{cls.__name__}(config, server_configs) raised", exc)
        return findings
    if await _timed(findings, "setup", "setup()", env.setup, SETUP_S) is _FAILED:
        return findings
    items = []
    for _ in range(ITEMS):
        item = await _timed(findings, "items", "get_next_item()", env.get_next_item, SETUP_S)
        if item is _FAILED:
            return findings
        items.append(item)
    findings.facts["items"] = [repr(i)[:160] for i in items]
    if items[0] is None:
        findings.problem("items", "get_next_item() returned None: a run would get no items")
        return findings
    result = await _timed(
        findings,
        "group",
        f"collect_trajectories() on one item (group of {config.group_size})",
        lambda: env.collect_trajectories(items[0]),
        GROUP_S,
    )
    if result is not _FAILED:
        group = _first_group(result)
        if group is None:
            findings.warnings.append("collect_trajectories() returned no group for the first item (None)")
        else:
            _check_scores(findings, group)
    if await _evaluate(findings, cls, env, work_dir):
        await _probe(findings, cls, config, work_dir)
    return findings


def check(
    cls: Any,
    file_path: Path,
    *,
    model_dir: str | None,
    base_url: str | None,
    tokenizer: str | None,
    server_type: str,
    work_dir: Path,
    preset: dict[str, Any] | None = None,
) -> Findings:
    """Run the checks against `base_url`, or the local model `model_dir` served for them."""
    server = None
    try:
        if base_url is None:
            assert model_dir is not None
            server = LocalModel(model_dir, work_dir / "model_server.log")
            began = time.monotonic()
            why = server.wait_ready()
            if why is not None:
                findings = Findings(file_path)
                findings.warnings.append(f"no rollouts: {why}")
                return findings
            base_url = server.base_url
            ready_s = round(time.monotonic() - began, 2)
        else:
            ready_s = None
        findings = asyncio.run(
            run_checks(
                cls,
                file_path,
                base_url=base_url,
                tokenizer=tokenizer or model_dir or "",
                model_name=model_dir or "default",
                server_type=server_type,
                work_dir=work_dir,
                preset=preset,
            )
        )
        if ready_s is not None:
            findings.facts["model_server_seconds"] = ready_s
        return findings
    finally:
        if server is not None:
            server.stop()
