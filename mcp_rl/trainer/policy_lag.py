"""How old the policy that sampled a batch is, and a bound on it.

The trainer's inference server tags every completion it samples with the step whose weights
sampled it (`PolicyVersions.record`); when a batch arrives, each sequence is looked up by its
completion (the tokens from its first trained position on, after the end of the prompt). Its lag
is `training step - 1 - sampling step`: 0 when it was sampled by the weights this step updates
(synchronous, as the cookbook's default), 1 when one step behind, and so on.

Atropos keeps up to `max_batches_offpolicy` batches queued and hands them out newest first, and
Tinker's importance ratio is unclipped, so a remote run trains only sequences at most
`max_lag` steps behind (default 1): older ones are not trained (their advantages stay in the
statistics) and counted. A sequence the server never sampled (lag unknown) is trained as given.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

from mcp_rl.scored_data import MASKED
from mcp_rl.trainer.backends.base import SampledSequence, Sampler, SamplingRequest

# Tokens of the prompt's end that take part in a completion's key (a whole prompt would cost
# memory for nothing: the end of the prompt and the completion identify a sample).
PROMPT_TAIL = 32
# Completions remembered (a few steps of the largest batches).
CAPACITY = 200_000
# The default bound on a remote backend: at most one step behind.
DEFAULT_MAX_LAG = 1


def _key(prompt_tail: list[int] | tuple[int, ...], completion: list[int] | tuple[int, ...]) -> int:
    return hash((tuple(prompt_tail[-PROMPT_TAIL:]), tuple(completion)))


class PolicyVersions:
    """Which policy step sampled each completion; thread-safe (the server samples in threads)."""

    def __init__(self, capacity: int = CAPACITY) -> None:
        self.capacity = capacity
        # The step whose weights the sampler serves now (0: the initial or resumed weights).
        self.current = 0
        self._seen: OrderedDict[int, int] = OrderedDict()
        self._lock = threading.Lock()

    def record(self, prompt: list[int], sequences: list[SampledSequence], step: int) -> None:
        with self._lock:
            for seq in sequences:
                key = _key(prompt, seq.tokens)
                self._seen[key] = step
                self._seen.move_to_end(key)
            while len(self._seen) > self.capacity:
                self._seen.popitem(last=False)

    def sampled_at(self, tokens: list[int], mask: list[int]) -> int | None:
        """The step that sampled this sequence's completion, None when unknown."""
        start = next((i for i, m in enumerate(mask) if m != MASKED), None)
        if start is None:
            return None
        with self._lock:
            return self._seen.get(_key(tokens[:start], tokens[start:]))

    def lags(self, batch: list[dict[str, Any]], step: int) -> list[int | None]:
        """Per sequence of the batch (groups in order): how many steps behind its sampler was."""
        out: list[int | None] = []
        for group in batch:
            for tokens, mask in zip(group["tokens"], group["masks"], strict=True):
                sampled = self.sampled_at(list(tokens), list(mask))
                out.append(None if sampled is None else max(0, step - 1 - sampled))
        return out


class TaggingSampler(Sampler):
    """A sampler that records which policy step produced each completion."""

    def __init__(self, inner: Any, versions: PolicyVersions) -> None:
        self.inner = inner
        self.versions = versions
        self.tokenizer = inner.tokenizer
        self.model_name = inner.model_name
        self.remote = bool(getattr(inner, "remote", False))

    def sample(self, request: SamplingRequest) -> list[SampledSequence]:
        step = self.versions.current  # the weights this request starts from
        sequences: list[SampledSequence] = self.inner.sample(request)
        self.versions.record(list(request.prompt_tokens), sequences, step)
        return sequences


def lag_metrics(lags: list[int | None], stale: int) -> dict[str, float]:
    known = [lag for lag in lags if lag is not None]
    out = {"policy_lag/unknown_sequences": float(len(lags) - len(known)), "policy_lag/stale_sequences": float(stale)}
    if known:
        out["policy_lag/mean"] = sum(known) / len(known)
        out["policy_lag/max"] = float(max(known))
    return out
