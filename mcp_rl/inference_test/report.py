"""Turning what a test left on disk into results: scores from the JSONL, a test summary.

Atropos `process` mode writes one JSON line per scored group (`scores`, and `messages` because
process mode forces include_messages). A run killed on its deadline can leave a half-written last
line; such lines are counted, not fatal.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from mcp_rl.inference_test.models import (
    FINAL_MODEL_STATES,
    MODEL_HTML,
    MODEL_JSONL,
    MODEL_LOG,
    InferenceTestResult,
    ModelResult,
    RolloutSample,
    StepResult,
    TestConfig,
    TestSpec,
    TestState,
    TestSummary,
    model_uri,
    test_uri,
)
from mcp_rl.model_specs import ModelSpec

PROMPT_CHARS = 400
COMPLETION_CHARS = 600
LOG_TAIL_CHARS = 2000
SAMPLES = 2


def initial_result(spec: TestSpec, model: ModelSpec, folder: Path) -> ModelResult:
    """A model's result before it ran: where its files will be and how to read them."""
    return ModelResult(
        model=model.id,
        name=model.name,
        scale=model.scale,
        provider=model.provider,
        slug=model.slug,
        output_file=str(folder / MODEL_JSONL),
        html_file=str(folder / MODEL_HTML),
        log_file=str(folder / MODEL_LOG),
        resources={
            "result": model_uri(spec.test_id, model.slug),
            "jsonl": model_uri(spec.test_id, model.slug, "jsonl"),
            "html": model_uri(spec.test_id, model.slug, "html"),
            "log": model_uri(spec.test_id, model.slug, "log"),
        },
    )


def read_groups(path: Path) -> tuple[list[dict[str, Any]], int]:
    """The groups of a process-mode JSONL and how many lines could not be read."""
    groups: list[dict[str, Any]] = []
    bad = 0
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return [], 0
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            group = json.loads(line)
        except json.JSONDecodeError:
            bad += 1
            continue
        if isinstance(group, dict) and isinstance(group.get("scores"), list):
            groups.append(group)
        else:
            bad += 1
    return groups, bad


def _truncate_tail(text: str, limit: int) -> str:
    return text if len(text) <= limit else "…" + text[-(limit - 1) :]


def _truncate_head(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _content(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):  # multi-part content: keep the text parts
        content = " ".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return "" if content is None else str(content)


def _split_rollout(messages: Any) -> tuple[str, str]:
    """(prompt, completion) of one rollout's messages: the last assistant turn is the completion."""
    if not isinstance(messages, list) or not messages:
        return "", ""
    messages = [m for m in messages if isinstance(m, dict)]
    last_assistant = max((i for i, m in enumerate(messages) if m.get("role") == "assistant"), default=None)
    if last_assistant is None:
        return "\n".join(f"{m.get('role')}: {_content(m)}" for m in messages), ""
    prompt = "\n".join(f"{m.get('role')}: {_content(m)}" for m in messages[:last_assistant])
    return prompt, _content(messages[last_assistant])


def _sample(step: int, score: float, messages: Any) -> RolloutSample:
    prompt, completion = _split_rollout(messages)
    return RolloutSample(
        step=step,
        score=score,
        prompt=_truncate_tail(prompt, PROMPT_CHARS),
        completion=_truncate_head(completion, COMPLETION_CHARS),
    )


def _pick_samples(groups: Sequence[dict[str, Any]]) -> list[RolloutSample]:
    """One correct and one incorrect rollout when both exist (the contrast is what helps), else the first ones."""
    correct: RolloutSample | None = None
    wrong: RolloutSample | None = None
    others: list[RolloutSample] = []
    for step, group in enumerate(groups, start=1):
        messages = group.get("messages") or []
        for i, score in enumerate(group["scores"]):
            rollout = messages[i] if i < len(messages) else None
            sample = _sample(step, float(score), rollout)
            if score > 0 and correct is None:
                correct = sample
            elif score <= 0 and wrong is None:
                wrong = sample
            elif len(others) < SAMPLES:
                others.append(sample)
        if correct is not None and wrong is not None:
            break
    picked = [s for s in (correct, wrong) if s is not None]
    return (picked + others)[:SAMPLES]


def tool_use(groups: Sequence[dict[str, Any]]) -> dict[str, float | int] | None:
    """What an MCP task's episodes say of the model's tool use (each group's `overrides`, one
    `{"mcp": {...}}` per episode: mcp_rl.environments.mcp_family.chat_episode.episode_facts)."""
    facts = [
        o["mcp"]
        for g in groups
        for o in (g.get("overrides") or [])
        if isinstance(o, dict) and isinstance(o.get("mcp"), dict)
    ]
    if not facts:
        return None
    n = len(facts)
    calls = sum(int(f.get("tool_calls") or 0) for f in facts)
    malformed = sum(int(f.get("malformed_calls") or 0) for f in facts)
    return {
        "episodes": n,
        "tool_calls_per_episode": round(calls / n, 3),
        "tool_call_validity": round(1.0 - malformed / calls, 4) if calls else 1.0,
        "tool_errors_per_episode": round(sum(int(f.get("tool_errors") or 0) for f in facts) / n, 3),
        "answered": round(sum(1 for f in facts if f.get("end") == "answer") / n, 4),
        "success": round(sum(1 for f in facts if float(f.get("reward") or 0.0) >= 1.0) / n, 4),
    }


def score_groups(result: ModelResult, groups: Sequence[dict[str, Any]], unreadable: int = 0) -> ModelResult:
    """`result` with its score fields filled from the groups (correct means score > 0)."""
    steps: list[StepResult] = []
    all_scores: list[float] = []
    for step, group in enumerate(groups, start=1):
        scores = [float(s) for s in group["scores"] if isinstance(s, (int, float)) and math.isfinite(s)]
        all_scores.extend(scores)
        steps.append(
            StepResult(
                step=step,
                completions=len(scores),
                correct=sum(1 for s in scores if s > 0),
                mean_score=round(sum(scores) / len(scores), 4) if scores else 0.0,
                scores=[round(s, 4) for s in scores],
            )
        )
    total = len(all_scores)
    correct = sum(1 for s in all_scores if s > 0)
    update: dict[str, Any] = {
        "steps": steps,
        "steps_tested": len(steps),
        "total_completions": total,
        "correct_completions": correct,
        "steps_with_correct": sum(1 for s in steps if s.correct > 0),
        "zero_variance_steps": sum(1 for s in steps if len(set(s.scores)) <= 1),
        "unreadable_lines": unreadable,
        "samples": _pick_samples(groups),
        "tool_use": tool_use(groups),
    }
    if total:
        mean = sum(all_scores) / total
        update |= {
            "accuracy": round(correct / total, 4),
            "mean_score": round(mean, 4),
            "score_std": round(math.sqrt(sum((s - mean) ** 2 for s in all_scores) / total), 4),
            "min_score": round(min(all_scores), 4),
            "max_score": round(max(all_scores), 4),
            "step_success_rate": round(update["steps_with_correct"] / len(steps), 4),
        }
    return result.model_copy(update=update)


def tail_text(path: Path, limit: int = LOG_TAIL_CHARS) -> str:
    """The last `limit` characters of a text file ('' if it does not exist)."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, 2)
            size = fh.tell()
            fh.seek(max(0, size - limit * 4))
            text = fh.read().decode("utf-8", errors="replace")
    except FileNotFoundError:
        return ""
    return text[-limit:]


def _succeeded(models: Iterable[ModelResult]) -> list[ModelResult]:
    return [m for m in models if m.state == "succeeded"]


def build_result(
    spec: TestSpec,
    models: list[ModelResult],
    output_dir: Path,
    started_at: float,
    state: TestState,
    finished_at: float | None = None,
    note: str | None = None,
    tokenizer_note: str | None = None,
) -> InferenceTestResult:
    """The whole test's answer from its models' results."""
    finished = [m for m in models if m.state in FINAL_MODEL_STATES]
    succeeded = _succeeded(models)
    scored = [m for m in succeeded if m.accuracy is not None]
    best = max(scored, key=lambda m: (m.accuracy or 0.0, m.mean_score or 0.0), default=None)
    if scored:
        working: bool | None = True
    elif len(finished) == len(models):
        working = False
    else:
        working = None
    avg = round(sum(m.accuracy or 0.0 for m in scored) / len(scored), 4) if scored else None
    now = time.time()
    rollouts = spec.num_steps * spec.group_size
    return InferenceTestResult(
        test_id=spec.test_id,
        state=state,
        environment=spec.environment.name,
        environment_file=str(spec.environment.file_path),
        test_config=TestConfig(
            num_steps=spec.num_steps,
            group_size=spec.group_size,
            rollouts_per_model=rollouts,
            total_rollouts=rollouts * len(models),
            max_parallel=spec.max_parallel,
            model_timeout_s=spec.model_timeout_s,
            tokenizer=spec.tokenizer,
            tokenizer_note=tokenizer_note,
            cost_estimates={m.id: m.price_note for m in spec.models if m.price_note}
            | ({"judge": spec.judge_cost} if spec.judge_cost else {}),
        ),
        models_tested=models,
        summary=TestSummary(
            steps_requested=spec.num_steps,
            models_tested=len(models),
            models_finished=len(finished),
            models_succeeded=len(succeeded),
            best_model=best.model if best else None,
            measured=measured(spec.env_config, spec.num_steps, spec.group_size),
            avg_accuracy=avg,
            environment_working=working,
            output_directory=str(output_dir),
        ),
        started_at=started_at,
        updated_at=now,
        finished_at=finished_at,
        elapsed_s=round((finished_at or now) - started_at, 2),
        message=note or describe(state, models, best, measured(spec.env_config, spec.num_steps, spec.group_size)),
        resource=test_uri(spec.test_id),
    )


def measured(spec_env: dict[str, Any], num_steps: int, group_size: int) -> str:
    """What a smoke test's scores measure, said with every figure (they are no held-out claim)."""
    temperature = spec_env.get("temperature")
    at = f"temperature {temperature:g}" if isinstance(temperature, int | float) else "the environment's temperature"
    return (
        f"{num_steps} training prompt(s) x {group_size} answers sampled at {at}: whether the environment runs and "
        "scores, not how good a model is (training prompts, sampled, a handful). A trained checkpoint's gain over its "
        "base on held-out items: rl_check_status / rl_get_results of its run, or rl_evaluate_checkpoint."
    )


def describe(state: TestState, models: list[ModelResult], best: ModelResult | None, what: str = "") -> str:
    """One sentence an agent can act on."""
    done = sum(1 for m in models if m.state in FINAL_MODEL_STATES)
    failed = [m for m in models if m.state in ("failed", "timed_out", "over_budget")]
    if state == "running":
        return f"Running: {done}/{len(models)} models finished."
    parts = []
    scored = [m for m in models if m.accuracy is not None]
    if best is not None:
        per_model = "; ".join(f"{m.model} {m.correct_completions}/{m.total_completions} correct" for m in scored)
        parts.append(f"The environment works. On {what or 'training prompts'} {per_model}.")
    else:
        parts.append("No model produced a scored group: check the errors and logs before training.")
    for m in failed:
        parts.append(f"{m.model} {m.state.replace('_', ' ')}: {m.error or 'see its log_tail'}")
    if state == "cancelled":
        parts.append("The test was cancelled before all models finished.")
    spent = usage_line(models)
    if spent:
        parts.append(spent)
    return " ".join(parts)


def usage_line(models: Iterable[ModelResult]) -> str:
    """What the test cost over all models ('' when nothing was counted)."""
    used = [m.usage for m in models if m.usage is not None]
    if not used:
        return ""
    requests = sum(u.requests for u in used)
    tokens = sum(u.total_tokens for u in used)
    costs = [u.cost_usd for u in used if u.cost_usd is not None]
    cost = f", ${sum(costs):.6f} reported by the provider" if costs else ""
    return f"Used {requests} requests and {tokens} tokens{cost}."
