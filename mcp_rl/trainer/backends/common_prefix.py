"""Training on a batch whose groups all start with the same tokens: those tokens run once.

The local backend already runs each group's prompt once for the group's completions. The groups
of a batch often share more: an environment's instructions and few-shot examples open every
prompt (arithmetic: ~50 of ~65 tokens). Forward and backward through those tokens were paid once
per group; here they are paid once per batch, and the gradient stays exact:

- the shared tokens' KV cache is computed once, with its autograd graph;
- each group builds on leaf copies of those tensors, so its own backward (one group at a time,
  memory bounded as before) stops at the leaves and leaves its gradient there, summed over the
  groups;
- `backward()` then carries that summed gradient through the shared tokens once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mcp_rl.trainer.backends.prompt_cache import croppable, shared_prefix

# Fewer shared tokens than this save less than the bookkeeping costs.
MIN_COMMON_TOKENS = 16


def common_length(prefixes: Sequence[Sequence[int]]) -> int:
    """Tokens every prefix starts with, leaving each at least one of its own; 0 when fewer
    than two prefixes or fewer than MIN_COMMON_TOKENS shared tokens."""
    if len(prefixes) < 2:
        return 0
    first = prefixes[0]
    n = min(len(p) for p in prefixes) - 1
    for other in prefixes[1:]:
        n = min(n, shared_prefix(first, other))
    return n if n >= MIN_COMMON_TOKENS else 0


class CommonPrefix:
    """The KV cache of the shared tokens (with its graph) and the leaves the groups build on."""

    def __init__(self, past: Any, length: int) -> None:
        self.length = length
        self._outputs = [t for layer in past.layers for t in (layer.keys, layer.values)]
        self._leaves = [t.detach().requires_grad_(True) for t in self._outputs]

    @classmethod
    def compute(cls, decoder: Any, tokens: Sequence[int], device: Any) -> CommonPrefix | None:
        """None when the model's cache cannot be shared this way (sliding-window or
        linear-attention layers): the groups then run their whole prompts as before."""
        # torch: only a local-backend process loads it
        import torch

        past = decoder(input_ids=torch.tensor([list(tokens)], device=device), use_cache=True).past_key_values
        return cls(past, len(tokens)) if croppable(past) else None

    def cache(self) -> Any:
        """A fresh cache over the leaves, for one group to extend."""
        # transformers: only a local-backend process loads it
        from transformers import DynamicCache

        return DynamicCache(ddp_cache_data=list(zip(self._leaves[0::2], self._leaves[1::2], strict=True)))

    def backward(self) -> None:
        """The groups' summed gradient through the shared tokens, once."""
        import torch  # torch: only a local-backend process loads it

        pairs = [
            (out, leaf.grad) for out, leaf in zip(self._outputs, self._leaves, strict=True) if leaf.grad is not None
        ]
        if pairs:
            torch.autograd.backward([out for out, _ in pairs], grad_tensors=[grad for _, grad in pairs])
