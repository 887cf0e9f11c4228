"""GEM's held-out evaluation plays the same fixed seeds every time, none of them a training seed
(issue 24): evaluations of one run are comparable game by game."""

from __future__ import annotations

from typing import Any

import pytest

from tests.fakes.tinker_server import write_tiny_tokenizer
from tests.gem.test_gem_tinker_sampling import (
    tinker_policy,  # noqa: F401 - a fixture
    tinker_profile_env,
)

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def tiny_tokenizer(tmp_path_factory: pytest.TempPathFactory) -> str:
    return write_tiny_tokenizer(tmp_path_factory.mktemp("tokenizer"))


async def test_every_evaluation_plays_the_same_held_out_seeds(
    tinker_policy: tuple[str, Any],  # noqa: F811
    tiny_tokenizer: str,
) -> None:
    url, _ = tinker_policy
    env = tinker_profile_env(url, tiny_tokenizer, eval_episodes=5, env_kwargs={"max_turns": 1})
    await env.setup()
    played: list[tuple[str, int]] = []
    original = env.play_episode

    async def recording(seed: int, split: str = "train") -> Any:
        played.append((split, seed))
        return await original(seed, split)

    env.play_episode = recording
    await env.evaluate()
    group, _ = await env.collect_trajectories(await env.get_next_item())
    await env.evaluate()
    evals = [seed for split, seed in played if split == "eval"]
    train = {seed for split, seed in played if split != "eval"}
    assert evals[:5] == evals[5:] and len(evals) == 10 and len(set(evals)) == 5
    assert train and not train & set(evals)
    assert min(evals) >= 1_000_000_000 > max(train)
