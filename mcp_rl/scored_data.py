"""Atropos's scored-data conventions, shared by the environments that write scored groups and
the trainer that reads them (stdlib only: the environment processes import it too).

A group's `masks` repeat its `tokens` with every position not to be trained on (the prompt, tool
output) replaced by MASKED; its `inference_logprobs` hold PROMPT_LOGPROB at those positions.
"""

from __future__ import annotations

# Defined in the public task interface (environments written outside mcp-rl import them there).
from mcp_rl.task import MASKED, PROMPT_LOGPROB, groups_already_trained

__all__ = ["MASKED", "PROMPT_LOGPROB", "REBN_OVER_BATCH", "groups_already_trained"]

# group_overrides key (GemEnv): the group's scores are discounted returns to be normalised over
# every such sequence of the step's batch (the GEM recipe's ReBN over the whole pool), not per group.
REBN_OVER_BATCH = "rebn_over_batch"
