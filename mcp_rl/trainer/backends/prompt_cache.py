"""KV caches of recent prompts, so a prompt that extends one seen before skips its shared part.

Multi-turn environments (GEM with the `concat` wrapper) send, turn after turn, a prompt that is
the previous one plus a few lines, and every episode starts with the same instructions. On a
CPU, prefilling that prompt is nearly all of a short sample's cost, so the local sampler keeps
the KV cache of its last few prompts and reuses the longest shared prefix.

A cache is only valid for the weights that computed it: every entry carries the weights'
version and a lookup under another version finds nothing (the backend bumps the version on
each optimizer step and on loading a checkpoint).
"""

from __future__ import annotations

import copy
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

# Fewer shared tokens than this are cheaper to recompute than to copy.
MIN_SHARED_TOKENS = 16


def shared_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def croppable(cache: Any) -> bool:
    """Only plain full-attention layers can be cut back to a prefix (a sliding-window or
    linear-attention layer has already forgotten or folded the tokens before its window)."""
    # transformers: only a local-backend process loads it
    from transformers.cache_utils import DynamicLayer

    layers = getattr(cache, "layers", None)
    return layers is not None and bool(layers) and all(type(layer) is DynamicLayer for layer in layers)


class PromptCache:
    """The KV caches of the most recently prefilled prompts (batch of one), at most
    `max_tokens` tokens in all, least recently used dropped first."""

    def __init__(self, max_tokens: int = 16_384) -> None:
        self.max_tokens = max_tokens
        self._entries: OrderedDict[tuple[int, ...], Any] = OrderedDict()
        self._version = 0
        self.reused_tokens = 0  # counters for tests and benches
        self.prefilled_tokens = 0

    def _tokens(self) -> int:
        return sum(len(key) for key in self._entries)

    def lookup(self, prompt: Sequence[int], version: int) -> tuple[int, Any]:
        """(n, cache): a private copy of a cache holding the first `n` tokens of `prompt`, with
        `n < len(prompt)` so at least one token is left to compute the next logits; (0, None)
        when nothing worth reusing is kept."""
        if version != self._version:
            self._entries.clear()
            self._version = version
        best_key, best = None, 0
        for key in self._entries:
            n = min(shared_prefix(key, prompt), len(prompt) - 1)
            if n > best:
                best_key, best = key, n
        if best_key is None or best < MIN_SHARED_TOKENS:
            self.prefilled_tokens += len(prompt)
            return 0, None
        self._entries.move_to_end(best_key)
        cache = copy.deepcopy(self._entries[best_key])
        if len(best_key) > best:
            cache.crop(best - len(best_key))
        self.reused_tokens += best
        self.prefilled_tokens += len(prompt) - best
        return best, cache

    def store(self, prompt: Sequence[int], cache: Any, version: int) -> None:
        """Keep a copy of the cache of exactly `prompt` (call before decoding extends it)."""
        if version != self._version or len(prompt) > self.max_tokens or not croppable(cache):
            return
        key = tuple(prompt)
        self._entries.pop(key, None)
        self._entries[key] = copy.deepcopy(cache)
        while self._tokens() > self.max_tokens:
            self._entries.popitem(last=False)
