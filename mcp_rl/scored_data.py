"""Atropos's scored-data conventions, shared by the environments that write scored groups and
the trainer that reads them (stdlib only: the environment processes import it too).

A group's `masks` repeat its `tokens` with every position not to be trained on (the prompt, tool
output) replaced by MASKED; its `inference_logprobs` hold PROMPT_LOGPROB at those positions.
"""

from __future__ import annotations

# The label of a token the trainer must not learn (also the ignore index of torch's losses).
MASKED = -100
# Atropos's placeholder logprob for prompt positions (never trained on).
PROMPT_LOGPROB = 1.0
# group_overrides key (GemEnv): the group's scores are discounted returns to be normalised over
# every such sequence of the step's batch (the GEM recipe's ReBN over the whole pool), not per group.
REBN_OVER_BATCH = "rebn_over_batch"


def groups_already_trained(curr_step: int, batch_size: int, group_size: int) -> int:
    """Groups the trainer consumed before a resumed run's first step (Atropos tells a registering
    environment `starting_step`): a resumed environment skips that many items so it continues
    its data order instead of replaying it from the start."""
    if curr_step <= 0 or batch_size <= 0 or group_size <= 0:
        return 0
    return curr_step * batch_size // group_size
