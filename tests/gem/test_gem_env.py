"""GemEnv against the real policy server (local model, the trainer's inference server).

Groups are exactly `group_size` transitions whose per-token advantages are the (ReBN) returns
of their turns; an environment that raises mid-episode loses that episode, counted and logged,
never the group or the run.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from mcp_rl.environments.loader import load_env_class
from mcp_rl.ports import allocate_ports
from mcp_rl.scored_data import REBN_OVER_BATCH
from mcp_rl.settings import bundled_environments_dir

pytestmark = [pytest.mark.slow, pytest.mark.anyio]
EASY = "game:GuessTheNumber-v0-easy"


class RaisingGuessEnv:
    """A GEM environment that breaks on the second turn of odd-seeded episodes."""

    def __init__(self, **_: object) -> None:
        from gem.envs.game_env.guess_the_number import GuessTheNumberEnv

        self.inner = GuessTheNumberEnv(min_number=1, max_number=10, max_turns=4)
        self.seed = 0
        self.turn = 0

    def reset(self, seed: int | None = None):
        self.seed, self.turn = seed or 0, 0
        return self.inner.reset(seed=seed)

    def step(self, action: str):
        self.turn += 1
        if self.seed % 2 == 1 and self.turn == 2:
            raise RuntimeError("board exploded")
        obs, reward, terminated, truncated, info = self.inner.step(action)
        return obs, reward, terminated, truncated or self.turn >= 3, info


@pytest.fixture(scope="module")
def policy_url(default_model: Path):
    from mcp_rl.trainer.backends.local import LocalBackend
    from mcp_rl.trainer.inference_server import InferenceService, ServerThread, build_app

    backend = LocalBackend(default_model, train=False)
    (port,) = allocate_ports(1)
    server = ServerThread(build_app(InferenceService(backend)), "127.0.0.1", port)
    server.start()
    yield f"http://127.0.0.1:{port}/v1"
    server.stop()


def make_env(policy_url: str, **overrides):
    from atroposlib.envs.base import APIServerConfig

    cls = load_env_class(bundled_environments_dir() / "gem_env.py", "GemEnv", bundled_environments_dir())
    config, _ = cls.config_init()
    model = os.environ["MCP_RL_MODEL"]
    values = {
        "tokenizer_name": model,
        "group_size": 6,
        "max_token_length": 512,
        "num_envs": 3,
        "max_tokens_per_turn": 6,
    }
    config = config.model_copy(update={**values, **overrides})
    server = APIServerConfig(
        model_name="policy",
        base_url=policy_url,
        api_key="x",
        server_type="sglang",
        tokenizer_name=model,
        health_check=False,
    )
    return cls(config, [server])


async def test_group_is_transitions_with_return_advantages(policy_url):
    env = make_env(policy_url)
    await env.setup()
    group, backlog = await env.collect_trajectories(await env.get_next_item())
    assert backlog == [] and len(group["tokens"]) == 6
    for tokens, mask, adv, lps in zip(
        group["tokens"], group["masks"], group["advantages"], group["inference_logprobs"]
    ):
        n_prompt = sum(1 for m in mask if m == -100)
        action = tokens[n_prompt:]
        assert 0 < n_prompt < len(tokens) and mask[n_prompt:] == action
        assert len(adv) == len(tokens) == len(lps)
        assert set(adv[:n_prompt]) == {0.0} and len(set(adv[n_prompt:])) == 1  # one return per transition
        assert set(lps[:n_prompt]) == {1.0} and all(lp <= 0.0 for lp in lps[n_prompt:])  # as sampled
    # ReBN: the raw returns travel, and the trainer normalises them over its whole batch.
    per_seq = [a[-1] for a in group["advantages"]]
    assert per_seq == pytest.approx(group["scores"])
    assert group["group_overrides"] == {REBN_OVER_BATCH: True}
    # Played transitions beyond the group are carried to the next one, never dropped.
    played = env._played_turns
    assert played == 6 + len(env._carry)
    await env.collect_trajectories(await env.get_next_item())
    assert env._played_turns == 12 + len(env._carry)
    metrics = env._counters.drain()
    assert metrics["gem/episodes"] >= 2 and 1.0 <= metrics["gem/turns_per_episode"] <= 4.0
    assert metrics["gem/action_tokens"] > 0 and metrics["gem/token_entropy"] > 0
    assert metrics["gem/dropped_episodes"] == 0.0


async def test_without_batch_normalisation_advantages_are_the_returns(policy_url):
    env = make_env(policy_url, batch_normalize=False, gamma=0.5)
    await env.setup()
    group, _ = await env.collect_trajectories(await env.get_next_item())
    assert [a[-1] for a in group["advantages"]] == pytest.approx(group["scores"])
    assert group.get("group_overrides") is None


async def test_without_partial_credit_near_misses_train_as_zero(policy_url):
    # One turn per episode: a valid wrong guess ends it with GEM's partial credit 1 - distance/9.
    env = make_env(
        policy_url,
        group_size=12,
        num_envs=4,
        gamma=1.0,
        batch_normalize=False,
        partial_credit=False,
        env_kwargs={"max_turns": 1},
        include_messages=True,
    )
    await env.setup()
    group, _ = await env.collect_trajectories(await env.get_next_item())
    given = [conversation[1]["reward"] for conversation in group["messages"]]
    assert any(0.0 < r < 1.0 for r in given), f"no near miss among {given}; the check below would be vacuous"
    assert group["scores"] == [r if r >= 1.0 or r < 0 else 0.0 for r in given]
    metrics = env._counters.drain()  # GEM's own returns are what the metrics report
    assert metrics["gem/episode_return"] == pytest.approx(sum(given) / len(given))


async def test_raising_environment_drops_episodes_not_the_group(policy_url, caplog):
    from gem.envs.registration import ENV_REGISTRY, register

    if "mcp_rl_test:Raising-v0" not in ENV_REGISTRY:
        register("mcp_rl_test:Raising-v0", RaisingGuessEnv)
    # Valid guesses keep episodes going to the second turn, where odd seeds raise.
    env = make_env(policy_url, env_id="mcp_rl_test:Raising-v0", wrappers="", group_size=4, num_envs=4)
    await env.setup()
    with caplog.at_level(logging.WARNING, logger="mcp_rl.gem_env"):
        group, _ = await env.collect_trajectories(1)
    assert len(group["tokens"]) == 4
    metrics = env._counters.drain()
    dropped = metrics["gem/dropped_episodes"]
    assert dropped >= 1 and metrics["gem/dropped/step_raised_RuntimeError"] == dropped
    assert "board exploded" in caplog.text and "dropped" in caplog.text


async def test_always_failing_environment_gives_up_the_group_with_a_reason(policy_url):
    from gem.envs.registration import ENV_REGISTRY, register

    class Broken(RaisingGuessEnv):
        def reset(self, seed: int | None = None):
            raise OSError("no board")

    if "mcp_rl_test:Broken-v0" not in ENV_REGISTRY:
        register("mcp_rl_test:Broken-v0", Broken)
    env = make_env(policy_url, env_id="mcp_rl_test:Broken-v0", wrappers="", num_envs=2)
    # setup() makes one instance up front; a broken reset only shows when episodes start.
    await env.setup()
    with pytest.raises(RuntimeError, match="every episode of 3 rounds failed"):
        await env.collect_trajectories(0)
    assert env._counters.dropped_total == 6


async def test_unknown_id_and_wrapper_fail_setup_with_closest(policy_url):
    env = make_env(policy_url, env_id="game:GuessTheNumber-v0-eazy")
    with pytest.raises(ValueError, match=f"Closest matches: {EASY}"):
        await env.setup()
    env = make_env(policy_url, wrappers="concat,nope")
    with pytest.raises(ValueError, match="Unknown GEM wrappers"):
        await env.setup()
