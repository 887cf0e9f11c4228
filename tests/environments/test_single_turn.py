"""The single-turn base (mcp_rl.environments.single_turn) as its environments use it: the scored
group on both Atropos server types, the greedy evaluation and the accuracy metrics; and no
environment borrowing another class's private methods."""

from __future__ import annotations

import ast
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from mcp_rl.scored_data import MASKED, PROMPT_LOGPROB
from tests.conftest import FIXTURES

arith = pytest.importorskip("mcp_rl.environments.bundled.arithmetic")
ENVIRONMENTS = Path(arith.__file__).parents[1]


class Server:
    """Stands in for Atropos's ServerManager: answers `answers` in turn, as text (openai type) or
    as token ids with logprobs (sglang type)."""

    def __init__(self, server_type: str, tokenizer: Any, answers: list[str]) -> None:
        self.servers = [SimpleNamespace(config=SimpleNamespace(server_type=server_type))]
        self.tokenizer, self.answers, self.calls = tokenizer, answers, []

    async def chat_completion(self, **kwargs: Any) -> Any:
        self.calls.append(kwargs)
        texts = [self.answers[i % len(self.answers)] for i in range(kwargs["n"])]
        return SimpleNamespace(
            choices=[SimpleNamespace(message=SimpleNamespace(content=t), finish_reason="stop") for t in texts]
        )

    async def tokens_and_logprobs_completion(self, **kwargs: Any) -> Any:
        self.calls.append(kwargs)
        outs = [self.tokenizer.encode(self.answers[i % len(self.answers)]) for i in range(kwargs["n"])]
        return kwargs["input_ids"], outs, [[-0.5] * len(o) for o in outs], ["stop"] * len(outs)


def _servers() -> list[Any]:
    from atroposlib.envs.base import APIServerConfig

    return [APIServerConfig(base_url="http://127.0.0.1:9/v1", api_key="x", server_type="openai", health_check=False)]


def _arithmetic(tokenizer: str, server_type: str, answers: list[str]) -> Any:
    config = arith.ArithmeticEnvConfig(tokenizer_name=tokenizer, group_size=4, use_wandb=False, max_operand=6)
    env = arith.ArithmeticEnv(config, _servers(), testing=True)
    env.server = Server(server_type, env.tokenizer, answers)
    return env


def _task(tokenizer: str, server_type: str, answers: list[str]) -> Any:
    from mcp_rl.environments.loader import load_env_class

    path = FIXTURES / "tasks" / "larger_number.py"
    cls = load_env_class(path, "LargerNumber", path.parent)
    env = cls(cls.env_config_cls(tokenizer_name=tokenizer, group_size=4, use_wandb=False), _servers(), testing=True)
    env.server = Server(server_type, env.tokenizer, answers)
    return env


@pytest.mark.anyio
@pytest.mark.parametrize("server_type", ["openai", "sglang"])
async def test_a_group_masks_the_prompt_and_carries_what_was_sampled(tiny_tokenizer: str, server_type: str) -> None:
    env = _arithmetic(tiny_tokenizer, server_type, ["w5 w6", "w7"])
    item = {"a": 2, "op": "+", "b": 3, "answer": 5}
    group, backlog = await env.collect_trajectories(item)
    assert backlog == [] and group is not None and len(group["tokens"]) == 4
    prompt = env.prompt_tokens(arith.build_messages(item))
    for tokens, mask in zip(group["tokens"], group["masks"], strict=True):
        assert tokens[: len(prompt)] == prompt and mask[: len(prompt)] == [MASKED] * len(prompt)
        assert mask[len(prompt) :] == tokens[len(prompt) :] and len(tokens) > len(prompt)
    assert group["scores"] == [0.0] * 4
    assert [m[-1]["content"] for m in group["messages"]] == ["w5 w6", "w7", "w5 w6", "w7"]
    if server_type == "openai":  # text only: no sampler logprobs to train against
        assert group["inference_logprobs"] is None
        assert all(t[-1] == env.tokenizer.eos_token_id for t in group["tokens"])  # a finished answer ends in EOS
    else:
        for tokens, logprobs in zip(group["tokens"], group["inference_logprobs"], strict=True):
            assert logprobs == [PROMPT_LOGPROB] * len(prompt) + [-0.5] * (len(tokens) - len(prompt))
    call = env.server.calls[0]
    assert (call["n"], call["max_tokens"], call["temperature"], call["split"]) == (4, 8, 1.0, "train")


@pytest.mark.anyio
async def test_a_group_with_an_empty_answer_is_not_sent(tiny_tokenizer: str) -> None:
    env = _arithmetic(tiny_tokenizer, "sglang", ["w5", ""])
    group, _ = await env.collect_trajectories({"a": 2, "op": "+", "b": 3, "answer": 5})
    assert group is None


@pytest.mark.anyio
async def test_evaluation_and_training_accuracy_reach_wandb_log(
    tiny_tokenizer: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from atroposlib.envs.base import BaseEnv

    logged: list[dict[str, Any]] = []

    async def wandb_log(self: Any, metrics: dict[str, Any] | None = None) -> None:
        logged.append(dict(metrics or {}))

    monkeypatch.setattr(BaseEnv, "wandb_log", wandb_log)
    env = _task(tiny_tokenizer, "openai", ["57"])
    right = {"a": 12, "b": 57, "answer": "57", "order": "larger second"}
    wrong = {"a": 12, "b": 58, "answer": "58", "order": "larger second"}
    await env.collect_trajectories(right)
    await env.collect_trajectories(wrong)
    env.eval_problems = [right, right, wrong, wrong, wrong]
    await env.evaluate()
    assert [c["temperature"] for c in env.server.calls[2:]] == [0.0] * 5  # greedy
    assert {c["split"] for c in env.server.calls[2:]} == {"eval"}
    await env.wandb_log({"kept": 1})
    await env.wandb_log()
    assert logged == [{"kept": 1, "train/percent_correct": 0.5, "eval/percent_correct": 0.4}, {}]


def _borrowed(tree: ast.Module) -> list[str]:
    """`name = Other._private` class attributes: a method borrowed from another class."""
    found = []
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
        for stmt in cls.body:
            value = stmt.value if isinstance(stmt, ast.Assign | ast.AnnAssign) else None
            if isinstance(value, ast.Attribute) and isinstance(value.value, ast.Name):
                if value.attr.startswith("_") or value.attr in ("get_next_item", "collect_trajectories", "evaluate"):
                    found.append(f"{cls.name}: {value.value.id}.{value.attr}")
    return found


def test_no_environment_borrows_another_class_s_methods() -> None:
    files = [*sorted((ENVIRONMENTS / "bundled").glob("*.py")), ENVIRONMENTS / "task_env.py"]
    borrowed = {f.name: _borrowed(ast.parse(f.read_text(encoding="utf-8"))) for f in files}
    assert not any(borrowed.values()), borrowed
    assert _borrowed(ast.parse("class A(B):\n    _rollouts = C._rollouts\n    x = C.public\n")) == ["A: C._rollouts"]
