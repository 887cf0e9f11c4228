"""A non-finite score is refused at the environment, naming it and the item (issue 27)."""

from __future__ import annotations

import math

import pytest

from mcp_rl.environments import score_guard


class FakeEnv:
    def __init__(self) -> None:
        self.sent: list = []

    async def handle_send_to_api(self, scored_data, item=None, do_send_to_api=True):
        self.sent.append(scored_data)


@pytest.mark.anyio
async def test_a_nan_score_is_an_error_naming_the_environment_and_the_item() -> None:
    class Env(FakeEnv):
        pass

    score_guard.install(Env, "gsm8k.py:GSM8kEnv")
    env = Env()
    await env.handle_send_to_api({"scores": [1.0, 0.0]}, {"question": "q1"})
    with pytest.raises(
        score_guard.NonFiniteScore,
        match=r"environment gsm8k.py:GSM8kEnv: item \{'question': 'q2'\}, sequence 1 was scored nan",
    ):
        await env.handle_send_to_api({"scores": [1.0, math.nan]}, {"question": "q2"})
    with pytest.raises(score_guard.NonFiniteScore, match="group 1 of item 7, sequence 0 was scored inf"):
        await env.handle_send_to_api([{"scores": [1.0]}, {"scores": [math.inf]}], 7)
    assert env.sent == [{"scores": [1.0, 0.0]}]  # nothing non-finite reached the API
