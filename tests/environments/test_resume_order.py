"""A resumed environment continues its data order instead of replaying it (issue 27)."""

from __future__ import annotations

import pytest

from mcp_rl.scored_data import groups_already_trained

arith = pytest.importorskip("mcp_rl.environments.bundled.arithmetic")


def _env(tokenizer: str, curr_step: int):
    from atroposlib.envs.base import APIServerConfig

    config = arith.ArithmeticEnvConfig(tokenizer_name=tokenizer, batch_size=8, group_size=4, use_wandb=False)
    server = APIServerConfig(base_url="http://127.0.0.1:9/v1", api_key="x", server_type="openai", health_check=False)
    # testing=True: Atropos's own stand-in server; no item here is ever sampled.
    env = arith.ArithmeticEnv(config, [server], testing=True)
    env.curr_step = curr_step  # what Atropos sets from the API's `starting_step` when it registers
    return env


@pytest.mark.anyio
async def test_a_resumed_arithmetic_env_continues_where_the_trained_steps_ended(tiny_tokenizer: str) -> None:
    fresh = _env(tiny_tokenizer, curr_step=0)
    # More items than one pass holds: the order goes on into a second shuffled pass.
    count = len(fresh.train_problems) + 12
    whole = [await fresh.get_next_item() for _ in range(count)]
    assert sorted(map(str, whole[: len(fresh.train_problems)])) == sorted(map(str, fresh.train_problems))
    resumed = _env(tiny_tokenizer, curr_step=3)  # 3 steps x 8 sequences / groups of 4 = 6 groups trained
    assert [await resumed.get_next_item() for _ in range(count - 6)] == whole[6:]


def test_groups_already_trained() -> None:
    assert groups_already_trained(0, 32, 4) == 0
    assert groups_already_trained(5, 32, 4) == 40
    assert groups_already_trained(5, -1, 4) == 0


def test_the_shared_training_order_skips_the_trained_groups_once() -> None:
    """The order the MCP environment draws its scenarios in too (environments/training_order.py)."""
    from mcp_rl.environments.training_order import TrainingOrder

    fresh = TrainingOrder(seed=7)
    whole = [fresh.next_index(5) for _ in range(12)]
    assert sorted(whole[:5]) == sorted(whole[5:10]) == [0, 1, 2, 3, 4]  # whole passes, each shuffled
    resumed = TrainingOrder(seed=7)
    for _ in range(2):  # only the first call skips
        resumed.skip_trained(3, 8, 4, lambda: resumed.next_index(5))
    assert [resumed.next_index(5) for _ in range(6)] == whole[6:]
