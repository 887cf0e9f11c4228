"""Scoring process-mode JSONL files and summarising a test (real files, no processes)."""

from __future__ import annotations

import json
from pathlib import Path

from mcp_rl.inference_test import report
from mcp_rl.inference_test.models import TestSpec
from mcp_rl.model_specs import ModelSpec, model_slug
from mcp_rl.runconfig import EnvironmentRef
from mcp_rl.supervisor.tail import tail_lines


def _group(scores: list[float], question: str = "What is 2 + 3?") -> dict:
    answers = [str(5 if s > 0 else 6) for s in scores]
    return {
        "tokens": [[1, 2, 3]] * len(scores),
        "masks": [[-100, 2, 3]] * len(scores),
        "scores": scores,
        "messages": [
            [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": question},
                {"role": "assistant", "content": a},
            ]
            for a in answers
        ],
    }


def _spec(tmp_path: Path, ids: list[str]) -> TestSpec:
    return TestSpec(
        test_id="t1",
        created_at=0.0,
        environment=EnvironmentRef(
            name="arithmetic", class_name="A", file_path=tmp_path / "a.py", project_root=tmp_path
        ),
        env_config={},
        num_steps=2,
        group_size=4,
        models=[ModelSpec(id=i, name=i, scale="s", provider="openrouter", slug=model_slug(i)) for i in ids],
        max_parallel=3,
        model_timeout_s=60,
        openrouter_base_url="http://127.0.0.1:1/v1",
    )


def test_scores_samples_and_a_torn_last_line(tmp_path: Path) -> None:
    path = tmp_path / "groups.jsonl"
    lines = [json.dumps(_group([1.0, 0.0, 1.0, 0.0])), json.dumps(_group([0.0, 0.0, 0.0, 0.0], "What is 7 + 1?"))]
    # A run killed mid-write leaves half a line: counted, not fatal.
    path.write_text("\n".join(lines) + "\n" + lines[0][:40], encoding="utf-8")
    groups, bad = report.read_groups(path)
    assert len(groups) == 2 and bad == 1

    spec = _spec(tmp_path, ["m/a"])
    result = report.score_groups(report.initial_result(spec, spec.models[0], tmp_path), groups, bad)
    assert result.total_completions == 8 and result.correct_completions == 2
    assert result.accuracy == 0.25 and result.mean_score == 0.25
    assert result.score_std == round((0.25 * 0.75) ** 0.5, 4)
    assert result.steps_with_correct == 1 and result.step_success_rate == 0.5
    assert result.zero_variance_steps == 1
    assert [s.correct for s in result.steps] == [2, 0]
    # One right and one wrong sample: prompt without the answer, completion = the answer.
    assert [s.score for s in result.samples] == [1.0, 0.0]
    assert result.samples[0].completion == "5" and result.samples[1].completion == "6"
    assert result.samples[0].prompt.endswith("user: What is 2 + 3?") and "assistant" not in result.samples[0].prompt


def test_samples_are_truncated(tmp_path: Path) -> None:
    group = _group([1.0, 0.0])
    group["messages"][0][-1]["content"] = "x" * 5000
    group["messages"][0][1]["content"] = "q" * 5000
    spec = _spec(tmp_path, ["m/a"])
    result = report.score_groups(report.initial_result(spec, spec.models[0], tmp_path), [group])
    sample = result.samples[0]
    assert len(sample.completion) == report.COMPLETION_CHARS and sample.completion.endswith("…")
    assert len(sample.prompt) == report.PROMPT_CHARS and sample.prompt.startswith("…")


def test_summary_picks_the_best_model_and_says_whether_the_env_works(tmp_path: Path) -> None:
    spec = _spec(tmp_path, ["m/a", "m/b", "m/c"])
    a, b, c = (report.initial_result(spec, m, tmp_path / m.slug) for m in spec.models)
    a = report.score_groups(a, [_group([1.0, 0.0, 0.0, 0.0])]).model_copy(update={"state": "succeeded"})
    b = report.score_groups(b, [_group([1.0, 1.0, 1.0, 0.0])]).model_copy(update={"state": "succeeded"})
    running = report.build_result(spec, [a, b, c.model_copy(update={"state": "running"})], tmp_path, 0.0, "running")
    assert running.summary.environment_working is True and running.summary.models_finished == 2
    c = c.model_copy(update={"state": "failed", "error": "boom"})
    done = report.build_result(spec, [a, b, c], tmp_path, 0.0, "completed", 10.0)
    assert done.summary.best_model == "m/b"
    assert done.summary.avg_accuracy == 0.5 and done.summary.models_succeeded == 2
    assert "m/c" in done.message and "m/b" in done.message
    assert done.test_config.total_rollouts == 2 * 4 * 3
    # Labelled as what it measured: training prompts, sampled; no "best model" claim; where held-out figures are.
    assert "best model" not in done.message and "m/a 1/4 correct; m/b 3/4 correct" in done.message
    assert "training prompt" in done.message and "rl_evaluate_checkpoint" in done.message
    assert done.summary.measured.startswith("2 training prompt(s) x 4 answers sampled at")

    nothing = report.build_result(spec, [c, c, c], tmp_path, 0.0, "completed", 1.0)
    assert nothing.summary.environment_working is False and nothing.summary.best_model is None


def test_log_tails(tmp_path: Path) -> None:
    log = tmp_path / "x.log"
    log.write_text("".join(f"line {i}\n" for i in range(10000)), encoding="utf-8")
    assert tail_lines(log, 3) == ["line 9997", "line 9998", "line 9999"]
    assert report.tail_text(log, 10) == "line 9999\n"[-10:]
    assert tail_lines(tmp_path / "missing.log", 3) == []
