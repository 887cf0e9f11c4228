"""Reading an Atropos environment's own evaluate() results (mcp_rl.proof.env_eval): per-item
samples into paired outcomes, metrics-only reports into an aggregate with an unpaired comparison,
and the static check of whether a class has an evaluate() of its own."""

from __future__ import annotations

import ast
import json
import math
import os
import re
from pathlib import Path
from typing import Any

import pytest

from mcp_rl.proof.env_eval import (
    CAPTURED_FILE,
    METRICS_FILE,
    SAMPLES_FILE,
    EnvEvaluateError,
    EnvEvaluation,
    defines_evaluate,
    evaluate_config,
    per_item_outcomes,
    read_evaluation,
)
from mcp_rl.proof.outcomes import read_outcomes
from mcp_rl.proof.stats import TWO_PROPORTION_TEST, unpaired_comparison
from mcp_rl.proof.summary import held_out_summary
from mcp_rl.rundir import eval_outcomes_file
from mcp_rl.trainer.trainer_eval import record_env_evaluation

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "envs"


def _write_jsonl(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def test_samples_are_paired_by_their_id_field() -> None:
    samples = [{"question": f"q{i}", "response": f"a{i}", "score": i % 2} for i in range(4)]
    outcomes, key, paired_by = per_item_outcomes(samples)
    assert (key, paired_by) == ("score", "question")
    assert [(o.item, o.score, o.completion) for o in outcomes or []] == [
        ("q0", 0.0, "a0"),
        ("q1", 1.0, "a1"),
        ("q2", 0.0, "a2"),
        ("q3", 1.0, "a3"),
    ]


def test_samples_without_id_are_paired_by_their_prompt_then_position() -> None:
    by_messages = [
        {"messages": [{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": "x"}], "correct": True}
        for i in range(3)
    ]
    outcomes, key, paired_by = per_item_outcomes(by_messages)
    assert (key, paired_by) == ("correct", "messages") and len({o.item for o in outcomes or []}) == 3
    assert all(o.score == 1.0 and o.completion == "x" for o in outcomes or [])
    same_prompt = [{"messages": [{"role": "user", "content": "q"}], "score": 0.5}] * 2
    outcomes, _, paired_by = per_item_outcomes(same_prompt)
    assert paired_by == "position" and [o.item for o in outcomes or []] == ["item-0", "item-1"]


def test_samples_without_a_common_score_give_no_outcomes() -> None:
    assert per_item_outcomes([{"question": "a", "score": 1}, {"question": "b"}]) == (None, None, None)
    assert per_item_outcomes([]) == (None, None, None)


def test_metrics_only_report_is_an_aggregate(tmp_path: Path) -> None:
    _write_jsonl(
        tmp_path / CAPTURED_FILE,
        [{"source": "wandb_log", "step": 0, "time": 1.0, "metrics": {"eval/percent_correct": 0.25, "eval/n": 40}}],
    )
    (tmp_path / METRICS_FILE).write_text(json.dumps({"results": {"all": {"eval/seconds": 3.0}}}), encoding="utf-8")
    result = read_evaluation(tmp_path)
    assert result.outcomes is None and (result.score_key, result.score, result.n) == ("eval/percent_correct", 0.25, 40)


def test_a_report_with_no_score_says_what_to_add(tmp_path: Path) -> None:
    _write_jsonl(tmp_path / SAMPLES_FILE, [{"question": "q"}])
    with pytest.raises(EnvEvaluateError, match="evaluate_log"):
        read_evaluation(tmp_path)


def test_defines_evaluate_reads_the_source() -> None:
    assert defines_evaluate(FIXTURES / "own_eval" / "larger_number.py", "LargerNumberEnv") is True
    assert defines_evaluate(FIXTURES / "good" / "counting.py", "SpecialCountingEnv") is False
    assert defines_evaluate(FIXTURES / "broken" / "broken.py", "Whatever") is None


def test_evaluate_config_points_the_servers_at_the_model(tmp_path: Path) -> None:
    config = evaluate_config(
        {"env": {"group_size": 4, "use_wandb": True}, "openai": [{"base_url": "http://x/v1", "server_type": "sglang"}]},
        tmp_path,
        "http://127.0.0.1:5/v1",
        "run:r@2",
    )
    # use_wandb on: reports guarded by it are made, and the capture keeps W&B a no-op (WANDB_MODE=disabled).
    assert config["env"] == {"group_size": 4, "use_wandb": True, "data_dir_to_save_evals": str(tmp_path)}
    assert config["openai"] == [{"base_url": "http://127.0.0.1:5/v1", "server_type": "sglang", "model_name": "run:r@2"}]


def test_unpaired_comparison_of_two_proportions() -> None:
    result = unpaired_comparison(0.5, 100, 0.7, 100)
    z = 0.2 / math.sqrt(0.6 * 0.4 * (2 / 100))
    assert result.p_value == pytest.approx(math.erfc(z / math.sqrt(2)))
    assert result.test == TWO_PROPORTION_TEST and result.ci_low is not None and result.ci_high is not None
    assert 0 < result.ci_low < 0.2 < result.ci_high < 0.4
    unknown = unpaired_comparison(0.5, None, 0.7, 100)
    assert unknown.p_value is None and unknown.ci_low is None and "no item count" in unknown.sentence


def test_run_records_per_item_and_aggregate_evaluations(tmp_path: Path) -> None:
    paired_run, aggregate_run = tmp_path / "a", tmp_path / "b"
    for step, scores in ((0, [0, 0, 1, 0]), (2, [1, 1, 1, 0])):
        samples = [{"id": f"i{k}", "score": s} for k, s in enumerate(scores)]
        outcomes, key, paired_by = per_item_outcomes(samples)
        result = EnvEvaluation(outcomes=outcomes, score=sum(scores) / 4, score_key=key, n=4, paired_by=paired_by)
        metrics = record_env_evaluation(paired_run, step, result)
        assert metrics["eval/score"] == sum(scores) / 4
    assert len(read_outcomes(eval_outcomes_file(paired_run, 2))) == 4 and "eval/p_value" in metrics
    summary = held_out_summary(paired_run)
    assert summary is not None and summary.paired and (summary.wins, summary.losses) == (2, 0)

    for step, score in ((0, 0.3), (2, 0.6)):
        agg = EnvEvaluation(outcomes=None, score=score, score_key="eval/percent_correct", n=200)
        metrics = record_env_evaluation(aggregate_run, step, agg)
    assert metrics["eval/base_score"] == 0.3 and metrics["eval/p_value"] < 0.001
    summary = held_out_summary(aggregate_run)
    assert summary is not None and not summary.paired and summary.test == TWO_PROPORTION_TEST
    assert (summary.n, summary.base_step, summary.step, summary.wins) == (200, 0, 2, None)
    assert "no per-item outcomes" in summary.sentence


def test_fixture_imports_nothing_from_mcp_rl() -> None:
    tree = ast.parse((FIXTURES / "own_eval" / "larger_number.py").read_text(encoding="utf-8"))
    modules = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    modules += [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    assert modules and not [m for m in modules if m.startswith("mcp_rl")]


def _run_with(settings_home: Path, name: str, file_path: Path, class_name: str, env: dict | None = None) -> Path:
    from mcp_rl.runconfig import EnvironmentRef
    from mcp_rl.settings import Settings
    from tests.conftest import make_env
    from tests.kit.runs import write_run_file

    settings = Settings.from_env(make_env(settings_home))
    config = write_run_file(settings, "r1", base_model="m")
    ref = EnvironmentRef(name=name, class_name=class_name, file_path=file_path, project_root=file_path.parent)
    config = config.model_copy(update={"environment": ref, "env": {**config.env, **(env or {})}})
    config.dump(config.paths.run_dir / "run.yaml")
    return config.paths.run_dir


def test_held_out_null_always_has_a_reason(home: Path) -> None:
    from mcp_rl.proof.held_out_note import held_out_note

    counting = _run_with(home, "counting", FIXTURES / "good" / "counting.py", "CountingEnv")
    note = held_out_note(counting, ended=True)
    assert "has no evaluate() of its own" in note and "evaluate_log(metrics=" in note and "'score'" in note
    own = _run_with(home, "larger_number", FIXTURES / "own_eval" / "larger_number.py", "LargerNumberEnv")
    assert "first evaluation (its own evaluate()) runs before step 1" in held_out_note(own, ended=False)
    assert "rl://runs/r1/logs/trainer" in held_out_note(own, ended=True)
    gem = FIXTURES.parents[2] / "mcp_rl" / "environments" / "bundled" / "gem_env.py"
    no_games = _run_with(home, "game:GuessTheNumber-v0-easy", gem, "GemEnv", {"eval_episodes": 0})
    assert "does not run for GEM yet" in held_out_note(no_games, ended=True)
    (counting / "run.yaml").write_text("{not yaml", encoding="utf-8")
    assert "run.yaml cannot be read" in held_out_note(counting, ended=True)


class Chooser:
    """A Sampler answering "Which is larger, a or b?" with the larger number, or the first."""

    model_name = "chooser"

    def __init__(self, right: bool) -> None:
        from tests.evaluation.test_trainer_eval import CharTokenizer

        self.tokenizer = CharTokenizer()
        self.right = right

    def sample(self, request: Any) -> list[Any]:
        from mcp_rl.trainer.backends.base import SampledSequence

        numbers = [int(x) for x in re.findall(r"\d+", self.tokenizer.decode(request.prompt_tokens))]
        answer = max(numbers) if self.right else numbers[0]
        tokens = self.tokenizer.encode(str(answer))
        return [SampledSequence(tokens=tokens, logprobs=[0.0] * len(tokens), finish_reason="stop")] * request.n


@pytest.mark.slow
def test_the_environments_own_evaluate_runs_unchanged_against_a_served_model(
    tmp_path: Path, default_model: Path
) -> None:
    from mcp_rl.ports import allocate_ports
    from mcp_rl.proof.env_eval import run_environment_evaluate
    from mcp_rl.trainer.inference_server import InferenceService, ServerThread, build_app

    fixture = FIXTURES / "own_eval" / "larger_number.py"
    results = {}
    for right in (False, True):
        (port,) = allocate_ports(1)
        server = ServerThread(build_app(InferenceService(Chooser(right))), "127.0.0.1", port)
        server.start()
        try:
            results[right] = run_environment_evaluate(
                file_path=fixture,
                class_name="LargerNumberEnv",
                project_root=fixture.parent,
                run_yaml={
                    "env": {"eval_size": 12, "tokenizer_name": str(default_model)},
                    "openai": [
                        {
                            "model_name": "m",
                            "base_url": "x",
                            "api_key": "x",
                            "server_type": "sglang",
                            "tokenizer_name": str(default_model),
                        }
                    ],
                },
                base_url=f"http://127.0.0.1:{port}/v1",
                out_dir=tmp_path / f"eval-{right}",
                child_env={**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"},
                timeout_s=300,
            )
        finally:
            server.stop()
    wrong, right_ = results[False], results[True]
    assert right_.outcomes is not None and wrong.outcomes is not None
    assert right_.n == wrong.n == 12 and right_.paired_by == "question"
    assert right_.score == 1.0 and 0.0 <= wrong.score < 1.0
    assert [o.item for o in right_.outcomes] == [o.item for o in wrong.outcomes]
    assert right_.metrics["eval/percent_correct"] == 1.0  # its evaluate_log metrics, read back
