"""An MCP task's episodes trained on the Tinker backend at the loopback Tinker (issue 47), as GEM's
are: whole multi-turn episodes against the real stdio server go to run-api as one group, and the
datums Tinker receives train exactly the policy's tokens (its sampled logprobs beside them) while
the prompt, the tool results and the chat template's turns weigh nothing."""

from __future__ import annotations

from pathlib import Path

import anyio
import numpy as np
import pytest

from mcp_rl.environments.mcp_family.episode import Trajectory, run_episode, scored_group
from mcp_rl.environments.mcp_family.taskfile import load
from mcp_rl.scored_data import MASKED
from tests.kit.tinker_wire import tinker_run_config, trainer_on_the_wire
from tests.mcp_family.kit import SMOL_TEMPLATE, CharTokenizer, ScriptedPolicy, call, write_task


def _episodes(tmp_path: Path) -> list[Trajectory]:
    task = load(write_task(tmp_path, extra="tools: [capital]\nsystem_prompt: Answer with one word.\n"))
    scenario = next(s for s in task.train + task.held_out if s.answer == "Lima")
    tokenizer = CharTokenizer(SMOL_TEMPLATE)
    scripts = [
        [call("capital", country="Peru"), "Lima"],  # right, after a call: 1
        [call("capital", country="Chile"), "Santiago"],  # wrong, after a call: 0
    ]

    async def play_all() -> list[Trajectory]:
        return [await run_episode(task, scenario, tokenizer, ScriptedPolicy(tokenizer, s)) for s in scripts]

    return anyio.run(play_all)


@pytest.mark.anyio
async def test_tinker_trains_the_policy_tokens_of_multi_turn_episodes_and_not_the_tool_output(
    tmp_path: Path, tiny_tokenizer: str
) -> None:
    episodes = await anyio.to_thread.run_sync(_episodes, tmp_path)
    assert [t.reward for t in episodes] == [1.0, 0.0] and all(t.turns == 2 and t.tool_calls == 1 for t in episodes)
    group = scored_group(episodes)
    group.pop("messages")
    config = tinker_run_config(
        tmp_path, tiny_tokenizer, num_steps=1, batch_size=2, group_size=2, run_id="mcp", max_token_trainer_length=4096
    )
    async with trainer_on_the_wire(config, tmp_path, tiny_tokenizer) as run:
        await run.post(group)
        assert await run.finish() == 0
    datums = [d for record in run.wire.forward_backward for d in record["datums"]]
    assert len(datums) == 2, "both episodes of the group are trained"
    for episode in episodes:
        # The datum of this episode: its tokens as input, shifted by one as targets.
        (datum,) = [d for d in datums if list(d["model_input"]) == episode.tokens[: len(d["model_input"])]]
        n = len(datum["model_input"])
        assert n == len(episode.tokens) - 1 and list(datum["target_tokens"]) == episode.tokens[1 : n + 1]
        trained = np.array([m != MASKED for m in episode.masks[1 : n + 1]])
        advantages, logprobs = datum["advantages"], datum["logprobs"]
        # Every policy token weighs the same (the episode's advantage, with its sign); nothing else does.
        sign = 1.0 if episode.reward == 1.0 else -1.0
        assert np.all(advantages[trained] * sign > 0) and np.allclose(advantages[trained], advantages[trained][0])
        assert np.all(advantages[~trained] == 0.0)
        assert np.allclose(logprobs[trained], -0.5)  # the sampled logprobs, sent for importance sampling
        # Two policy turns with the environment's turn (the tool's answer) between them, untrained.
        runs = np.flatnonzero(np.diff(np.concatenate([[0], trained.astype(int), [0]])) == 1)
        assert len(runs) == 2
        text = "".join(chr(t) if t else "<|im_end|>" for t in episode.tokens)
        answer = "Lima" if episode.reward == 1.0 else "unknown country Chile"
        at = text.index(f"<tool_response>\n{answer}\n</tool_response>")
        assert not trained[at - 1 : at - 1 + len(answer) + 30].any()
