"""The order training items are drawn in, shared by the environments that draw from a list (the
single-turn base, the MCP environment): shuffled passes over the items, seeded, and the resume
skip, so a resumed run continues its data order instead of replaying it from the start."""

from __future__ import annotations

import random
from collections.abc import Callable

from mcp_rl.scored_data import groups_already_trained


class TrainingOrder:
    """Shuffled passes over item indexes (one pass, then another), drawn with `rng`."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self._order: list[int] = []
        self._resumed = False

    def next_index(self, count: int) -> int:
        """The next index of `count` items."""
        if not self._order:
            self._order = list(range(count))
            self.rng.shuffle(self._order)
        return self._order.pop()

    def skip_trained(self, curr_step: int, batch_size: int, group_size: int, draw: Callable[[], object]) -> None:
        """Once, at the first draw: `draw()` as many times as the groups the trainer consumed
        before a resumed run's first step (Atropos tells a registering environment its step)."""
        if self._resumed:
            return
        self._resumed = True
        for _ in range(groups_already_trained(curr_step, batch_size, group_size)):
            draw()
