"""The bundled arithmetic environment: problems, split, verifier; `process` mode against the
local model server with an OpenAI-type client (the smoke-test path)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.kit.run_harness import child_env, free_port, http_ok, start
from tests.kit.runs import ARITHMETIC
from tests.kit.wait import wait_for

arith = pytest.importorskip("mcp_rl.environments.bundled.arithmetic")


def test_problems_are_seeded_and_the_eval_split_is_held_out() -> None:
    config = arith.ArithmeticEnvConfig(problem_seed=3)
    train, evals = arith.make_problems(config)
    again_train, again_evals = arith.make_problems(arith.ArithmeticEnvConfig(problem_seed=3))
    assert (train, evals) == (again_train, again_evals)
    key = lambda p: (p["a"], p["op"], p["b"])  # noqa: E731
    assert not {key(p) for p in train} & {key(p) for p in evals}
    assert len(train) + len(evals) == 400
    # At least 200 held-out problems by default; none is the twin of a training problem up to
    # commutation, and none is a question the few-shot prompt answers.
    assert len(evals) >= 200
    twin = lambda p: (p["op"], min(p["a"], p["b"]), max(p["a"], p["b"]))  # noqa: E731
    assert not {twin(p) for p in train} & {twin(p) for p in evals}
    assert not {twin(p) for p in evals} & {("+", 3, 4), ("+", 5, 12)}
    assert all(p["answer"] == p["a"] + p["b"] for p in train)
    other_train, _ = arith.make_problems(arith.ArithmeticEnvConfig(problem_seed=4))
    assert other_train != train


def test_other_operators() -> None:
    train, evals = arith.make_problems(arith.ArithmeticEnvConfig(operations="-*", max_operand=5))
    problems = train + evals
    assert {p["op"] for p in problems} == {"-", "*"}
    assert all(p["answer"] == (p["a"] - p["b"] if p["op"] == "-" else p["a"] * p["b"]) for p in problems)


@pytest.mark.parametrize(
    ("text", "score"),
    [
        ("12", 1.0),
        (" 12 ", 1.0),
        ("12.", 1.0),
        ("13", 0.0),
        ("12 apples", 0.0),
        ("The answer is 12", 0.0),
        ("", 0.0),
        ("1 2", 0.0),
        ("-12", 0.0),
    ],
)
def test_verifier_is_exact(text: str, score: float) -> None:
    assert arith.score_answer(text, 12) == score


def test_prompt_is_a_short_few_shot_chat() -> None:
    messages = arith.build_messages({"a": 2, "op": "+", "b": 5, "answer": 7})
    assert messages[0]["role"] == "system" and messages[-1] == {"role": "user", "content": "2 + 5"}
    assert [m["role"] for m in messages[1:5]] == ["user", "assistant", "user", "assistant"]
    assert arith.build_messages({"a": 2, "op": "+", "b": 5}, few_shot=False)[1:] == [
        {"role": "user", "content": "2 + 5"}
    ]


@pytest.mark.slow
def test_process_mode_against_an_openai_type_server(tmp_path: Path) -> None:
    model = os.environ["MCP_RL_MODEL"]
    port = free_port()
    env = child_env(tmp_path)
    server = start(
        "model",
        [sys.executable, "-m", "mcp_rl.trainer.serve_model", "--model", model, "--port", str(port)],
        tmp_path / "model.log",
        env,
        tmp_path,
    )
    try:
        wait_for(lambda: http_ok(f"http://127.0.0.1:{port}/health"), 180, "model server", watch=[server])
        out = tmp_path / "groups.jsonl"
        result = subprocess.run(
            [
                sys.executable,
                str(ARITHMETIC),
                "process",
                "--env.total_steps",
                "2",
                "--env.group_size",
                "4",
                "--env.use_wandb",
                "false",
                "--env.data_path_to_save_groups",
                str(out),
                "--env.tokenizer_name",
                model,
                "--openai.base_url",
                f"http://127.0.0.1:{port}/v1",
                "--openai.model_name",
                "default",
                "--openai.server_type",
                "openai",
                "--openai.health_check",
                "false",
            ],
            env={**env, "OPENAI_API_KEY": "x"},
            cwd=tmp_path,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert result.returncode == 0, result.stderr[-3000:]
        groups = [json.loads(line) for line in out.read_text().splitlines()]
        assert len(groups) == 2
        for group in groups:
            assert len(group["tokens"]) == len(group["scores"]) == 4
            assert all(s in (0.0, 1.0) for s in group["scores"])
            assert group["inference_logprobs"] is None  # an OpenAI-type server gives no token logprobs
            for tokens, mask in zip(group["tokens"], group["masks"], strict=True):
                assert len(tokens) == len(mask) and mask[0] == -100 and mask[-1] != -100
        assert out.with_suffix(".html").is_file()
    finally:
        server.stop()
