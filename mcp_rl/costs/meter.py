"""Counting the tokens a paid backend is sent and returns, and pricing them.

The Tinker backend counts at its SDK calls (what goes over the wire): each sample request's
prompt (prefill, once per request whatever num_samples), the tokens sampled back, the tokens
of every sequence sent to forward_backward (trained), and forward-only passes (counted as
prefill). The trainer takes the counts once per step.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from mcp_rl.costs.rates import TinkerRates

MILLION = 1_000_000


@dataclass(frozen=True)
class TokenCounts:
    prefill: int = 0
    sampled: int = 0
    trained: int = 0

    def __add__(self, other: TokenCounts) -> TokenCounts:
        return TokenCounts(self.prefill + other.prefill, self.sampled + other.sampled, self.trained + other.trained)

    def scaled(self, factor: float) -> TokenCounts:
        return TokenCounts(round(self.prefill * factor), round(self.sampled * factor), round(self.trained * factor))


def usd(counts: TokenCounts, rates: TinkerRates | None) -> float | None:
    """The estimated USD of `counts` (None: no rates, so unknown; never 0 for that)."""
    if rates is None:
        return None
    return (counts.prefill * rates.prefill + counts.sampled * rates.sample + counts.trained * rates.train) / MILLION


class TokenMeter:
    """Thread-safe counters: sampling runs on many threads while a step trains."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending = TokenCounts()
        self.total = TokenCounts()

    def add(self, prefill: int = 0, sampled: int = 0, trained: int = 0) -> None:
        counts = TokenCounts(prefill, sampled, trained)
        with self._lock:
            self._pending = self._pending + counts
            self.total = self.total + counts

    def take(self) -> TokenCounts:
        """What was counted since the last take (one step's tokens)."""
        with self._lock:
            taken, self._pending = self._pending, TokenCounts()
        return taken
