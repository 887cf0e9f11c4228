"""Validating a task or environment before any run (rl_validate_environment).

The file is loaded and checked in a child process (validate_child: the user's code may import
anything, print, fork, raise, or hang), under control (mcp_rl.environments.child); the child gets
no key of ours unless the task names it, and the report is scrubbed of every key before it is
written or answered. The report is recorded under
$MCP_RL_HOME/validations/ with the file's digest, so a start can tell whether the file as it is
now ever passed (`validation_for`; the start answer's notes say when it did not).
No paid call: the only model it samples is the local base model.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from mcp_rl import redact
from mcp_rl.atomic import write_text_atomic
from mcp_rl.environments.child import run_child
from mcp_rl.environments.degenerate_probes import CREDIT_SHARE, MEAN_SHARE
from mcp_rl.environments.discovery import EnvironmentInfo
from mcp_rl.environments.mcp_family.probes import PROBED_SCENARIOS
from mcp_rl.environments.mcp_family.taskfile import named_variables
from mcp_rl.errors import UserError
from mcp_rl.models import default_model_dir, is_hf_model_dir
from mcp_rl.settings import Settings

VALIDATIONS_DIR = "validations"
TIMEOUT_S = 600.0
SAMPLED_ITEMS = 4


class Problem(BaseModel):
    check: str = Field(
        description="import, init, items, messages, overlap, reference, wrong_answer, degenerate_answer, "
        "base_model_answer; Atropos environments: setup, items, group, scores, evaluate"
    )
    message: str
    exception: str | None = None
    file: str | None = None
    line: int | None = None


class ValidationReport(BaseModel):
    environment: str
    file_path: str
    file_sha256: str
    ok: bool = Field(description="True: no problem found (warnings may remain).")
    kind: str | None = None
    problems: list[Problem] = []
    warnings: list[str] = []
    train_items: int | None = None
    held_out_items: int | None = None
    references_scored: int | None = None
    degenerate_replies: list[dict[str, Any]] | None = Field(
        None,
        description="What degenerate replies score over a sample of held-out items (an empty reply, a long digit "
        "string, the prompt echoed, the most common reference answer given to every item): each probe's mean and "
        f"share of items given any credit. A warning names any past its threshold (a mean above {MEAN_SHARE:.0%} of "
        f"the score range; credit on more than {CREDIT_SHARE:.0%} of items for a reply that is not an answer). An "
        "MCP task file's final answers are probed with its own reward (a check included) over at most "
        f"{PROBED_SCENARIOS} scenarios, adding every distinct expected answer joined in one reply (all_answers); "
        "mcp.degenerate_probes says how many were probed, or why a read_back or judge reward cannot be.",
    )
    base_model: dict[str, Any] | None = Field(
        None, description="The local base model's sampled answers (temperature 1) with their scores and timings."
    )
    atropos: dict[str, Any] | None = Field(
        None,
        description="An Atropos environment run against the local base model: setup/items/group/evaluate seconds, "
        "the group's scores, and what evaluate() reported (metric, score, source).",
    )
    mcp: dict[str, Any] | None = Field(
        None,
        description="An MCP task file: the tools the server listed, those offered to the policy, those withheld "
        "for a destructiveHint/openWorldHint, how the tools render for the base model, the server's seconds.",
    )
    seconds: float
    validated_at: float
    next_step: str = ""


def file_digest(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def record_path(settings: Settings, file_path: Path) -> Path:
    stem = re.sub(r"[^A-Za-z0-9_.-]", "_", Path(file_path).stem)
    key = hashlib.sha256(str(Path(file_path).resolve()).encode()).hexdigest()[:10]
    return settings.home / VALIDATIONS_DIR / f"{stem}-{key}.json"


def _base_model(settings: Settings) -> Path | None:
    """The local base model's folder when it is already there (never converted here)."""
    for candidate in (settings.model_path, default_model_dir(settings)):
        if candidate is not None and is_hf_model_dir(Path(candidate)):
            return Path(candidate)
    return None


def validate(
    settings: Settings,
    env: EnvironmentInfo,
    sample: bool = True,
    timeout_s: float = TIMEOUT_S,
    cancel: threading.Event | None = None,
) -> ValidationReport:
    """Check `env` in a child process (mcp_rl.environments.child: own session, bounded output,
    deadline, `cancel`, nothing left behind) and record the report, scrubbed of every key
    (UserError when the child fails or is cancelled)."""
    args = [str(env.file_path), env.class_name, str(env.project_root)]
    if env.preset:  # rg:letter_counting is the bundled reasoning-gym environment with datasets preset
        args += ["--preset", json.dumps(env.preset)]
    model = _base_model(settings) if sample else None
    if model is not None:
        args += ["--model", str(model), "--samples", str(SAMPLED_ITEMS)]
    return _checked(
        settings,
        "mcp_rl.environments.validate_child",
        args,
        env.select_name or env.name,
        env.file_path,
        env.env_vars,
        timeout_s,
        cancel,
    )


def validate_mcp_task(
    settings: Settings,
    task_file: Path,
    sample: bool = True,
    timeout_s: float = TIMEOUT_S,
    cancel: threading.Event | None = None,
) -> ValidationReport:
    """Check an MCP task file (`*.mcp.yaml`) in a child process
    (mcp_rl.environments.mcp_family.validate): it loads, its server starts (with exactly the
    variables the file names) and lists its tools, the allowed tools render (through the local
    base model's chat template when `sample` and the model is here), each reference answer
    scores. Recorded like an environment's validation, under the task file."""
    task_file = Path(task_file).expanduser().resolve()
    if not task_file.is_file():
        raise UserError(f"MCP task file {task_file} does not exist: give the path of an existing *.mcp.yaml file.")
    args = [str(task_file)]
    model = _base_model(settings) if sample else None
    if model is not None:
        args += ["--tokenizer", str(model)]
    return _checked(
        settings,
        "mcp_rl.environments.mcp_family.validate",
        args,
        task_file.name,
        task_file,
        named_variables(task_file),
        timeout_s,
        cancel,
        next_ok=f"set task_file to {task_file} on the selected 'mcp' environment, then rl_test_inference to "
        "smoke-test it",
    )


def _checked(
    settings: Settings,
    module: str,
    args: list[str],
    name: str,
    file_path: Path,
    named: Sequence[str],
    timeout_s: float,
    cancel: threading.Event | None,
    next_ok: str | None = None,
) -> ValidationReport:
    digest = file_digest(file_path)
    began = time.monotonic()
    # user code: the allow-list plus exactly the variables it names
    done = run_child(
        settings,
        module,
        args,
        env=settings.user_code_env(list(named)),
        timeout_s=timeout_s,
        what=f"validating {name}",
        cancel=cancel,
    )
    if done.cancelled:
        raise UserError(f"Validating {name} was cancelled (its process and all it started were ended).")
    if done.timed_out:
        raise UserError(
            f"Validating {name} took over {timeout_s:g} s and was stopped: check that its items are quick to "
            "make and that nothing at import time waits (network, input)."
        )
    data = done.report
    if not isinstance(data, dict):
        why = done.report_error or "it sent no report"
        tail = done.stderr.last_lines(1) or done.stdout.last_lines(1) or ["no output"]
        raise UserError(
            f"Validating {name} failed before it could report ({why}; exit {done.returncode}): "
            f"{redact.scrub(tail[-1])[:300]}"
        )
    data = redact.scrub_json(data)
    ok = bool(data.get("ok"))
    report = ValidationReport(
        environment=name,
        file_path=str(file_path),
        file_sha256=digest,
        ok=ok,
        kind=data.get("kind"),
        problems=[Problem(**p) for p in data.get("problems", [])],
        warnings=data.get("warnings", []),
        train_items=data.get("train_items"),
        held_out_items=data.get("held_out_items"),
        references_scored=data.get("references_scored"),
        degenerate_replies=data.get("degenerate_replies") or (data.get("atropos") or {}).get("degenerate_replies"),
        base_model=data.get("base_model"),
        atropos=data.get("atropos"),
        mcp=data.get("mcp"),
        seconds=round(time.monotonic() - began, 2),
        validated_at=time.time(),
        next_step=(
            (next_ok or f"rl_select_environment('{name}'), then rl_test_inference to smoke-test it")
            if ok
            else f"Fix the problems in {file_path} (each names its line or field), then call rl_validate_environment "
            "again."
        ),
    )
    path = record_path(settings, file_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, report.model_dump_json(indent=1))
    return report


def validation_for(settings: Settings, file_path: Path) -> ValidationReport | None:
    """The recorded validation of the file as it is now (None: never validated, or changed since)."""
    path = record_path(settings, file_path)
    try:
        report = ValidationReport.model_validate_json(path.read_text(encoding="utf-8"))
        current = file_digest(file_path)
    except (OSError, ValueError):
        return None
    return report if report.file_sha256 == current else None


def start_note(settings: Settings, file_path: Path, name: str) -> str | None:
    """A note for a start of a task that never passed validation as it is now (else None)."""
    report = validation_for(settings, file_path)
    if report is not None and report.ok:
        return None
    if report is None:
        return (
            f"Task {name} was not validated as it is now: rl_validate_environment('{name}') checks its items, "
            "held-out overlap and scores before you spend a run on it."
        )
    return (
        f"Task {name} failed its last validation ({len(report.problems)} problem(s), e.g. "
        f"{report.problems[0].message if report.problems else 'see the report'}): rl_validate_environment('{name}')."
    )
