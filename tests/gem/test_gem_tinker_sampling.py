"""GemEnv at the Tinker profile against the loopback Tinker (the real tinker SDK, the trainer's
real inference server): what it samples is what it trains (issue 27), and its held-out evaluation
plays the same fixed seeds every time, none of them a training seed (issue 24)."""

from __future__ import annotations

from typing import Any

import pytest

from mcp_rl.environments.loader import load_env_class
from mcp_rl.ports import allocate_ports
from mcp_rl.scored_data import REBN_OVER_BATCH
from mcp_rl.settings import bundled_environments_dir
from tests.kit.tinker_wire import make_backend, serve

pytestmark = pytest.mark.anyio


@pytest.fixture
def tinker_policy(tiny_tokenizer: str):
    """(policy URL, the fake service's wire): sampling goes through TinkerBackend.sample."""
    from mcp_rl.trainer.inference_server import InferenceService, ServerThread, build_app

    with serve(tiny_tokenizer) as server:
        backend = make_backend(server)
        backend.prepare()
        (port,) = allocate_ports(1)
        thread = ServerThread(build_app(InferenceService(backend)), "127.0.0.1", port)
        thread.start()
        try:
            yield f"http://127.0.0.1:{port}/v1", server.wire
        finally:
            thread.stop()


def tinker_profile_env(policy_url: str, tokenizer: str, **overrides: Any):
    from atroposlib.envs.base import APIServerConfig

    cls = load_env_class(bundled_environments_dir() / "gem_env.py", "GemEnv", bundled_environments_dir())
    config, _ = cls.config_init()
    values = {"tokenizer_name": tokenizer, "profile": "tinker", "max_token_length": 4096, "group_size": 8}
    config = config.model_copy(update={**values, **overrides})
    server = APIServerConfig(
        model_name="policy",
        base_url=policy_url,
        api_key="x",
        server_type="sglang",
        tokenizer_name=tokenizer,
        health_check=False,
    )
    env = cls(config, [server])
    assert env.config.num_envs == 64 and env.config.max_tokens_per_turn == 1024  # the recipe's values
    return env


async def test_a_tinker_profile_run_samples_at_most_a_quarter_more_than_it_trains(
    tinker_policy: tuple[str, Any], tiny_tokenizer: str
) -> None:
    url, wire = tinker_policy
    env = tinker_profile_env(url, tiny_tokenizer)
    await env.setup()
    trained = 0
    for _ in range(6):  # 3 steps of 2 groups of 8 transitions
        group, _ = await env.collect_trajectories(await env.get_next_item())
        assert len(group["tokens"]) == 8
        assert group["group_overrides"] == {REBN_OVER_BATCH: True}
        # Raw returns go to the trainer, which normalises them over the whole batch.
        assert [a[-1] for a in group["advantages"]] == pytest.approx(group["scores"])
        trained += len(group["tokens"])
    sampled = sum(s["num_samples"] for s in wire.samples)
    # Each sample request is one turn (one transition); before, a group played 64 episodes for 8.
    assert trained == 48 and sampled <= 1.25 * trained, (sampled, trained)
    assert sampled == trained + len(env._carry)  # nothing played is thrown away


async def test_evaluation_plays_exactly_its_episodes(tinker_policy: tuple[str, Any], tiny_tokenizer: str) -> None:
    url, wire = tinker_policy
    env = tinker_profile_env(url, tiny_tokenizer, eval_episodes=5, env_kwargs={"max_turns": 1})
    await env.setup()
    before = len(wire.samples)
    await env.evaluate()
    assert len(wire.samples) - before == 5  # one-turn episodes: one request each, not a round of 64
    assert env._eval_metrics["eval/turns_per_episode"] == 1.0


async def test_every_evaluation_plays_the_same_held_out_seeds(
    tinker_policy: tuple[str, Any], tiny_tokenizer: str
) -> None:
    # Issue 24: evaluations of one run are comparable game by game, on seeds no training plays.
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


async def test_a_resumed_gem_env_plays_new_episodes(tinker_policy: tuple[str, Any], tiny_tokenizer: str) -> None:
    url, _ = tinker_policy
    env = tinker_profile_env(url, tiny_tokenizer, batch_size=16, seed=100)
    env.curr_step = 3  # what Atropos sets from the trainer's starting_step on registration
    await env.get_next_item()
    # 3 steps trained at most 48 transitions, so at most 48 episodes: seeds 100..147 are behind it.
    assert env._next_seed == 148
