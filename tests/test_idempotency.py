"""Idempotency records: reused within the TTL, made anew after it, expired ones removed."""

from __future__ import annotations

import os
import time
from pathlib import Path

from mcp_rl.idempotency import IdempotencyStore


def test_a_key_is_answered_once_within_its_ttl_and_expired_records_are_removed(tmp_path: Path) -> None:
    store = IdempotencyStore(tmp_path, ttl_s=3600)
    calls: list[int] = []

    def make() -> dict[str, int]:
        calls.append(1)
        return {"run": len(calls)}

    assert store.once("start", "k1", make) == ({"run": 1}, False)
    assert store.once("start", "k1", make) == ({"run": 1}, True)
    (first,) = tmp_path.glob("start-*.json")
    old = time.time() - 3 * 3600
    os.utime(first, (old, old))  # a record from long ago
    assert store.once("start", "k2", make) == ({"run": 2}, False)
    assert not first.exists()  # expired past twice the TTL: removed
    assert len(list(tmp_path.glob("start-*.json"))) == 1
