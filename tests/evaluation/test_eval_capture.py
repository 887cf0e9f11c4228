"""Held-out figures from every way an Atropos environment reports its evaluation
(mcp_rl.environments.eval_capture, read by mcp_rl.proof.env_eval): the five styles of the
public Atropos environments, as small fixtures importing nothing from mcp-rl, each run unchanged
in Atropos's evaluate mode by the real runner child against a loopback OpenAI-compatible server;
and the metric rule on reports not shaped like those fixtures."""

from __future__ import annotations

import ast
import os
import re
from pathlib import Path

import pytest

from mcp_rl.environments.eval_capture import (
    Source,
    choose_metric,
    eval_split_sizes,
    pending_eval_metrics,
    returned_metrics,
)
from mcp_rl.proof.env_eval import EnvEvaluateError, read_evaluation, run_environment_evaluate
from tests.fakes.fake_openrouter import FakeOpenRouter

STYLES = Path(__file__).resolve().parents[1] / "fixtures" / "envs" / "report_styles"
EVAL_SIZE = 24


def _pairs() -> list[tuple[int, int]]:
    # The fixtures' own eval split (make_pairs is the same in each file), read without importing mcp_rl.
    import random

    pairs = [(a, b) for a in range(10, 100) for b in range(10, 100) if a != b]
    random.Random(7).shuffle(pairs)
    return pairs[:EVAL_SIZE]


def _responder(model: str, prompt: str, index: int) -> str:
    a, b = (int(x) for x in re.findall(r"\d+", prompt.rsplit("larger", 1)[-1])[:2])
    return str(a)  # right only when the first number is the larger


# style file -> (class, metric the note names, source, n, its source mentions)
CASES = {
    "eval_metrics_append": ("AppendEnv", "eval/percent_correct", "self.eval_metrics", "self.test"),
    "evaluate_log_samples": ("EvaluateLogEnv", "score", "per-item samples", "samples"),
    "returned_dict": ("ReturnedDictEnv", "accuracy", "evaluate() returned", "total_evaluated"),
    "wandb_log_super": ("WandbLogSuperEnv", "eval/accuracy", "wandb_log", "self.test_pairs"),
    "wandb_log_direct": ("WandbDirectEnv", "eval/acc", "wandb.log", "self.eval_set"),
}


def test_style_fixtures_import_nothing_from_mcp_rl() -> None:
    for path in STYLES.glob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        modules = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
        modules += [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
        assert "atroposlib.envs.base" in modules and not [m for m in modules if m.startswith("mcp_rl")], path


@pytest.mark.parametrize("style", sorted(CASES))
def test_each_reporting_style_gives_a_score_named_with_its_source(
    style: str, tmp_path: Path, tiny_tokenizer: str
) -> None:
    class_name, metric, source, n_source = CASES[style]
    first_is_larger = sum(a > b for a, b in _pairs()) / EVAL_SIZE
    assert 0 < first_is_larger < 1
    with FakeOpenRouter(responder=_responder, catalog=["first"]) as fake:
        for model in ("first",):  # one model: each child is a few seconds of atroposlib imports
            result = run_environment_evaluate(
                file_path=STYLES / f"{style}.py",
                class_name=class_name,
                project_root=STYLES,
                run_yaml={
                    "env": {"eval_size": EVAL_SIZE, "tokenizer_name": tiny_tokenizer},
                    "openai": [{"model_name": model, "api_key": "x", "server_type": "openai"}],
                },
                base_url=fake.base_url,
                out_dir=tmp_path / model,
                child_env={**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HOME": str(tmp_path)},
                model_name=model,
                timeout_s=120,
            )
            assert result.score_key == metric and source in (result.source or ""), result.summary()
            assert result.n == EVAL_SIZE and n_source in (result.n_source or ""), result.summary()
            assert (result.outcomes is not None) == (style == "evaluate_log_samples")
            assert metric in result.measure() and source in result.measure()
            assert result.score == pytest.approx(first_is_larger)
    # W&B stayed a no-op: nothing written under the child's HOME or working directory.
    assert not list(tmp_path.glob("**/wandb")) and not list(STYLES.glob("wandb"))


def _reports(**by_source: dict[str, float]) -> list[tuple[Source, dict[str, float]]]:
    names = {s.name.lower(): s for s in Source}
    return sorted(((names[k], v) for k, v in by_source.items()), key=lambda r: list(Source).index(r[0]))


def test_the_metric_rule_is_deterministic_and_takes_proportions_only() -> None:
    # A count named `correct`, a std, a length and a 0-100 score are never the headline.
    reports = _reports(
        returned={"correct": 150.0, "total": 200.0, "eval/accuracy_std": 0.1, "score_pct": 73.0, "pass_rate": 0.4},
        wandb_log={"train/completion_lengths": 0.5, "train/percent_correct": 0.2},
    )
    assert choose_metric(reports) == ("train/percent_correct", 0.2, Source.WANDB_LOG)
    # eval-named before others within a tier, then by source order, then by name.
    tie = _reports(eval_metrics={"b_acc": 0.5}, returned={"eval/acc_b": 0.6, "eval/acc_a": 0.7})
    assert choose_metric(tie) == ("eval/acc_a", 0.7, Source.RETURNED)
    same = _reports(evaluate_log={"eval/accuracy": 0.3}, wandb={"eval/accuracy": 0.9})
    assert choose_metric(same) == ("eval/accuracy", 0.3, Source.EVALUATE_LOG)
    # A named metric is taken whatever its value, exactly or by its last part.
    assert choose_metric(reports, "score_pct") == ("score_pct", 73.0, Source.RETURNED)
    assert choose_metric(tie, "acc_b") == ("eval/acc_b", 0.6, Source.RETURNED)
    assert choose_metric(reports, "nope") is None
    assert choose_metric(_reports(returned={"loss": 0.3, "eval/total": 40.0})) is None


def test_nothing_found_lists_what_was_seen(tmp_path: Path) -> None:
    (tmp_path / "captured_metrics.jsonl").write_text(
        '{"source": "returned", "metrics": {"bleu": 0.3, "rouge": 0.4}}\n'
        '{"source": "eval_split", "sizes": {"eval_rows": 50}}\n',
        encoding="utf-8",
    )
    with pytest.raises(EnvEvaluateError) as caught:
        read_evaluation(tmp_path)
    assert "the dict evaluate() returned: bleu, rouge" in str(caught.value) and "eval_metric" in str(caught.value)
    named = read_evaluation(tmp_path, "bleu")
    assert (named.score_key, named.score, named.n) == ("bleu", 0.3, 50) and "self.eval_rows" in (named.n_source or "")
    with pytest.raises(EnvEvaluateError, match="'meteor' .* Seen: the dict evaluate"):
        read_evaluation(tmp_path, "meteor")


def test_hook_helpers_read_the_shapes_public_environments_use() -> None:
    assert pending_eval_metrics([("eval/a", 0.5), {"accuracy": 0.2, "total": 9}, "junk"]) == {
        "eval/a": 0.5,
        "accuracy": 0.2,
        "total": 9,
    }
    assert pending_eval_metrics({"x": 1}) == {"x": 1} and pending_eval_metrics(None) == {}
    assert returned_metrics(({"accuracy": 0.5}, [1, 2])) == {"accuracy": 0.5}
    assert returned_metrics(None) is None and returned_metrics("text") is None

    class Env:
        def __init__(self) -> None:
            self.test = list(range(7))
            self.eval_metrics = [1, 2]  # Atropos's bookkeeping, not a split
            self.eval_prompt = "not sized data"
            self.eval_scores = [1.0, 0.0]  # what evaluate() produced, not what it plays
            self.train = list(range(100))
            self.testing = False

    assert eval_split_sizes(Env()) == {"test": 7}


def test_the_note_of_an_evaluation_with_no_score_lists_what_was_seen(home: Path) -> None:
    from mcp_rl.proof.env_eval import CONFIG_FILE, LOG_FILE, NO_SCORE_FILE
    from mcp_rl.proof.held_out_note import held_out_note
    from mcp_rl.rundir import EVAL_DIR
    from tests.evaluation.test_env_eval import _run_with

    run_dir = _run_with(home, "style_returned_dict", STYLES / "returned_dict.py", "ReturnedDictEnv")
    folder = run_dir / EVAL_DIR / "env_step_000000"
    folder.mkdir(parents=True)
    (folder / CONFIG_FILE).write_text("env: {}\n")
    (folder / LOG_FILE).write_text("")
    (folder / "captured_metrics.jsonl").write_text('{"source": "returned", "metrics": {"bleu": 0.3}}\n')
    with pytest.raises(EnvEvaluateError) as caught:
        read_evaluation(folder)
    (folder / NO_SCORE_FILE).write_text(str(caught.value))
    note = held_out_note(run_dir, ended=True)
    assert "Seen: the dict evaluate() returned: bleu" in note and "eval_metric" in note and str(folder) in note
