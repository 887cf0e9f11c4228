"""Rollouts to read (issue 34): the trainer keeps a few groups per step, bounded, and
rl_get_rollouts / rl://runs/{id}/rollouts/{step} page through them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mcp import Client

from mcp_rl.runconfig import RunPaths
from mcp_rl.rundir import ROLLOUT_TEXT_CHARS, ROLLOUTS_FILE, RolloutGroup
from mcp_rl.server.app import build_server
from mcp_rl.settings import Settings
from mcp_rl.trainer.advantages import build_examples
from mcp_rl.trainer.rollouts import rollout_groups
from mcp_rl.trainer.status import RunRecorder
from tests.conftest import make_env
from tests.kit.runs import write_run

MASKED = -100


def group(scores: list[float], answers: list[str]) -> dict:
    n = len(scores)
    prompt = [{"role": "user", "content": "What is 2 + 3?"}]
    return {
        "tokens": [[5, 6, 7, 8 + i] for i in range(n)],
        "masks": [[MASKED, MASKED, 7, 8 + i] for i in range(n)],
        "scores": scores,
        "messages": [prompt + [{"role": "assistant", "content": a}] for a in answers],
    }


def test_a_step_keeps_a_group_with_signal_and_one_without_bounded() -> None:
    batch = [
        group([0.0, 0.0], ["6", "7"]),
        group([0.0, 0.0], ["4", "9"]),
        group([1.0, 0.0], ["5", "x" * (ROLLOUT_TEXT_CHARS + 500)]),
    ]
    examples, _ = build_examples(batch)
    kept = rollout_groups(3, batch, examples)
    assert [(g.step, g.group, g.signal) for g in kept] == [(3, 0, False), (3, 2, True)]
    mixed = kept[1]
    assert mixed.prompt == "user: What is 2 + 3?"
    assert [a.reward for a in mixed.answers] == [1.0, 0.0]
    assert mixed.answers[0].advantage > 0 > mixed.answers[1].advantage
    assert mixed.answers[0].text == "5" and len(mixed.answers[1].text) == ROLLOUT_TEXT_CHARS
    assert all(a.advantage == 0 for a in kept[0].answers)
    # A group without messages keeps its rewards and advantages, and says there is no text.
    bare = {k: v for k, v in batch[2].items() if k != "messages"}
    (only,) = rollout_groups(1, [bare], build_examples([bare])[0])
    assert only.answers[0].text == "(4 tokens, no text sent)" and only.answers[0].reward == 1.0


@pytest.mark.anyio
async def test_the_tool_and_resource_page_through_a_steps_groups(tmp_path: Path) -> None:
    settings = Settings.from_env(make_env(tmp_path))
    run_dir = write_run(settings, "roll1", 2)
    recorder = RunRecorder(RunPaths.for_run(run_dir), 2)
    for step in (1, 2):
        batch = [group([1.0, 0.0], [f"5 at {step}", "6"]), group([0.0, 0.0], ["7", "8"])]
        recorder.rollouts(rollout_groups(step, batch, build_examples(batch)[0]))
    assert (run_dir / ROLLOUTS_FILE).is_file()
    async with Client(build_server(settings)) as client:
        latest = (await client.call_tool("rl_get_rollouts", {"run_id": "roll1", "limit": 1})).structured_content
        assert latest["step"] == 2 and latest["steps_kept"] == 2 and latest["total"] == 2
        assert latest["next_offset"] == 1 and "offset=1" in latest["message"]
        answer = latest["groups"][0]["answers"][0]
        assert (
            answer["text"] == "5 at 2" and answer["reward"] == 1.0 and answer["advantage"] == pytest.approx(1.0, 1e-4)
        )
        page = await client.call_tool("rl_get_rollouts", {"run_id": "roll1", "step": 1, "offset": 1})
        first = page.structured_content
        assert first["step"] == 1 and first["next_offset"] is None
        assert [g["signal"] for g in first["groups"]] == [False]
        read = await client.read_resource("rl://runs/roll1/rollouts/1")
        whole = json.loads(read.contents[0].text)
        assert [RolloutGroup.model_validate(g).answers[0].text for g in whole["groups"]] == ["5 at 1", "7"]
