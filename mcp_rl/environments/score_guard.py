"""Non-finite scores stop at the environment, with words (installed by the runner).

The Atropos API accepts a group scored NaN or inf, then cannot encode it: every `/batch` answers
500 while the group sits at the head of the queue, and the run stalls with no cause given. The
runner hooks the environment's `handle_send_to_api` so such a group is refused before it is sent:
the error names the environment, the item and the sequence (Atropos logs it in env.log and drops
that group; the environment goes on).
"""

from __future__ import annotations

import math
from typing import Any

from mcp_rl.environments import atropos_hooks


class NonFiniteScore(ValueError):
    pass


def check_scores(scored: Any, environment: str, item: Any) -> None:
    groups = scored if isinstance(scored, list) else [scored]
    for g, group in enumerate(groups):
        if not isinstance(group, dict):
            continue
        for i, score in enumerate(group.get("scores") or []):
            try:
                finite = math.isfinite(float(score))
            except (TypeError, ValueError):
                finite = False
            if not finite:
                where = f"group {g} of item {item!r}" if len(groups) > 1 else f"item {item!r}"
                raise NonFiniteScore(
                    f"environment {environment}: {where}, sequence {i} was scored {score!r}; scores must be "
                    "finite numbers (the Atropos API cannot hand out a batch holding it): fix the "
                    "environment's scoring; this group is not sent"
                )


def install(cls: Any, environment: str) -> None:
    """Check every group `cls` sends to the API (mcp_rl.environments.atropos_hooks)."""
    atropos_hooks.before_send(cls, lambda scored_data, item: check_scores(scored_data, environment, item))
