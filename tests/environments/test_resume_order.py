"""A resumed environment continues its data order instead of replaying it (issue 27)."""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest

from mcp_rl.scored_data import groups_already_trained

arith = pytest.importorskip("mcp_rl.environments.bundled.arithmetic")


class Items:
    """The state ArithmeticEnv.get_next_item (also gsm8k's) reads, with the real method."""

    get_next_item = arith.ArithmeticEnv.get_next_item

    def __init__(self, curr_step: int) -> None:
        self.curr_step = curr_step
        self.config = SimpleNamespace(batch_size=8, group_size=4)
        self.train_problems = [{"question": str(i)} for i in range(5)]
        self._rng = random.Random(0)
        self._order: list[int] = []


@pytest.mark.anyio
async def test_a_resumed_arithmetic_env_continues_where_the_trained_steps_ended() -> None:
    fresh = Items(curr_step=0)
    whole = [(await fresh.get_next_item())["question"] for _ in range(12)]
    resumed = Items(curr_step=3)  # 3 steps x 8 sequences / groups of 4 = 6 groups already trained
    assert [(await resumed.get_next_item())["question"] for _ in range(6)] == whole[6:]


def test_groups_already_trained() -> None:
    assert groups_already_trained(0, 32, 4) == 0
    assert groups_already_trained(5, 32, 4) == 40
    assert groups_already_trained(5, -1, 4) == 0
