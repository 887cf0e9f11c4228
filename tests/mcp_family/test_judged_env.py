"""McpEnv with a judge task: a group of real episodes (the tiny stdio server) scored by the judge
at the loopback OpenRouter, its verdict on the group, its spend in the metrics; the cap ends the
group with the cause, held-out episodes are judged alone."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from mcp_rl.environments.loader import load_env_class
from mcp_rl.environments.mcp_family.episode import Sample
from mcp_rl.environments.mcp_family.judge import JudgeCostCapReached, JudgeUnavailable
from mcp_rl.settings import bundled_environments_dir
from tests.fakes.fake_openrouter import FakeOpenRouter
from tests.mcp_family.kit import SMOL_TEMPLATE, CharTokenizer, call, write_task

pytestmark = pytest.mark.anyio
JUDGE = "fake/judge"


def judge_responder(model: str, prompt: str, index: int) -> str:
    bodies = re.findall(r'<trajectory id="(\d+)">\n(.*?)\n</trajectory>', prompt, flags=re.S)
    return json.dumps(
        {
            "scores": [
                {
                    "trajectory_id": i,
                    "score": 0.9 if "Lima" in b.split("</tool_response>")[-1] else 0.1,
                    "explanation": "x",
                }
                for i, b in bodies
            ]
        }
    )


class Alternating:
    """Concurrent episodes: a call first, then answers Lima and Cusco in turn."""

    def __init__(self, tokenizer: CharTokenizer) -> None:
        self.tokenizer, self.answers = tokenizer, 0

    def __call__(self, split: str) -> Any:
        async def policy(tokens: list[int], max_tokens: int) -> Sample:
            if "<tool_response>\nLima" in self.tokenizer.decode(tokens):  # (the system prompt shows the format)
                text = ("Lima", "Cusco")[self.answers % 2]
                self.answers += 1
            else:
                text = call("capital", country="Peru")
            ids = [ord(c) for c in text] + [0]
            return Sample(ids, [-0.3] * len(ids), text)

        return policy


async def make_env(tmp_path: Path, tokenizer_dir: str, judge: str, group_size: int = 4) -> Any:
    task_file = write_task(tmp_path, extra=f"tools: [capital]\nreward: {{kind: judge}}\njudge: {judge}\n")
    cls = load_env_class(bundled_environments_dir() / "mcp_env.py", "McpEnv", bundled_environments_dir())
    from atroposlib.envs.base import APIServerConfig

    config, _ = cls.config_init()
    config = config.model_copy(
        update={
            "tokenizer_name": tokenizer_dir,
            "group_size": group_size,
            "task_file": str(task_file),
            "include_messages": True,
        }
    )
    server = APIServerConfig(
        model_name="p",
        tokenizer_name=tokenizer_dir,
        base_url="http://127.0.0.1:1/v1",
        api_key="x",
        server_type="sglang",
        health_check=False,
    )
    env = cls(config, [server])
    env.tokenizer = CharTokenizer(SMOL_TEMPLATE)
    env._policy = Alternating(env.tokenizer)
    await env.setup()
    return env


async def test_a_group_is_judged_and_its_verdict_travels_with_it(
    tmp_path: Path, tiny_tokenizer: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with FakeOpenRouter(responder=judge_responder, behaviours={JUDGE: "ok"}, api_key="sk-or-judge") as fake:
        monkeypatch.setenv("OPENROUTER_API_KEY", "sk-or-judge")
        monkeypatch.setenv("OPENROUTER_BASE_URL", fake.base_url)
        env = await make_env(tmp_path, tiny_tokenizer, f"{{model: {JUDGE}, max_cost_usd: 1}}")
        scenario = next(s for s in env.task.train + env.task.held_out if s.answer == "Lima")
        group, _ = await env.collect_trajectories(scenario)
        assert group is not None and sorted(group["scores"]) == [0.1, 0.1, 0.9, 0.9]
        verdict = group["group_overrides"]["judge"]
        assert verdict["model"] == JUDGE and verdict["scores"] == group["scores"] and verdict["cost_usd"] > 0
        assert "<tool_response>" in verdict["prompt"] and len(fake.completions_for(JUDGE)) == 1
        # Masks are unchanged by the judge: tool output still untrained.
        assert all(-100 in m for m in group["masks"])
        await env.evaluate()  # each held-out episode judged alone
        metrics = env.judge.metrics()
        assert metrics["judge/calls"] == 1 + len(env.task.held_out) and metrics["judge/spent_usd"] > 0
        assert 0.0 < env._eval_metrics["eval/percent_correct"] <= 0.9


async def test_the_cap_ends_the_group_with_its_cause_and_a_missing_key_is_named(
    tmp_path: Path, tiny_tokenizer: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with FakeOpenRouter(responder=judge_responder, behaviours={JUDGE: "ok"}) as fake:
        monkeypatch.setenv("OPENROUTER_API_KEY", "sk-or-judge")
        monkeypatch.setenv("OPENROUTER_BASE_URL", fake.base_url)
        env = await make_env(tmp_path, tiny_tokenizer, f"{{model: {JUDGE}, max_cost_usd: 0.0001}}", group_size=2)
        with pytest.raises(JudgeCostCapReached, match="judge cost cap reached") as info:
            await env.collect_trajectories(env.task.train[0])
        assert fake.completions_for(JUDGE) == []
        # Every group then fails the same way: the supervisor ends the run with the judge's sentence.
        from mcp_rl.environments.failure_report import HealthRecorder
        from mcp_rl.supervisor.env_watch import hopeless
        from mcp_rl.supervisor.supervisor import Policy

        recorder, policy = HealthRecorder(tmp_path / "env_health.json"), Policy()
        for _ in range(policy.env_fail_streak):
            recorder.failed(info.value)
        cause = hopeless(recorder.health, 0.0, policy.env_fail_streak, policy.env_no_score_s)
        assert cause is not None and "JudgeCostCapReached: judge cost cap reached" in cause
        assert "judge.max_cost_usd $0.0001" in cause
        monkeypatch.delenv("OPENROUTER_API_KEY")
        with pytest.raises(JudgeUnavailable, match="set OPENROUTER_API_KEY"):
            await make_env(tmp_path, tiny_tokenizer, f"{{model: {JUDGE}, max_cost_usd: 1}}")


async def test_the_local_judge_is_the_policy_server_through_the_chat_template(
    tmp_path: Path, tiny_tokenizer: str
) -> None:
    env = await make_env(tmp_path, tiny_tokenizer, "{model: local}", group_size=2)
    episodes = env._policy
    judge_prompts: list[str] = []

    def policy(split: str) -> Any:
        play = episodes(split)

        async def either(tokens: list[int], max_tokens: int) -> Sample:
            text = env.tokenizer.decode(tokens)
            if "Grading standards" not in text:
                return await play(tokens, max_tokens)
            judge_prompts.append(text)
            answer = judge_responder("local", text, 0)
            return Sample([ord(c) for c in answer], None, answer)

        return either

    env._policy = policy
    group, _ = await env.collect_trajectories(next(s for s in env.task.train + env.task.held_out if s.answer == "Lima"))
    assert group is not None and sorted(group["scores"]) == [0.1, 0.9]
    verdict = group["group_overrides"]["judge"]
    assert verdict["model"] == "local" and verdict["cost_usd"] == 0.0 and env.judge.ledger.spent_usd == 0.0
    # One request, rendered by the chat template (the system turn holds the rubric), greedy ("eval").
    (prompt,) = judge_prompts
    assert prompt.startswith("<|im_start|>system\nAll of the trajectories") and prompt.endswith(
        "<|im_start|>assistant\n"
    )
    assert "The tools offered: capital" in prompt
