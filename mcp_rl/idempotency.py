"""Idempotency keys: a request retried with the same key gets the first answer, for a day.

A host that times out a tool call and retries it must not start a second training run. The
first answer is kept as a small JSON file per key in the state directory (so any later server
process sees it), written under an exclusive lock on the key, so two concurrent retries make one
run. A damaged record is kept aside, never silently dropped.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from mcp_rl.atomic import write_text_atomic
from mcp_rl.errors import UserError
from mcp_rl.locking import exclusive_lock

KEY_TTL_S = 24 * 3600.0
MAX_KEY_LENGTH = 200


class Remembered(BaseModel):
    scope: str
    key: str
    created_at: float
    answer: dict[str, Any]


class IdempotencyStore:
    """Answers by (scope, key) under `folder`."""

    def __init__(self, folder: Path, ttl_s: float = KEY_TTL_S) -> None:
        self.folder = folder
        self.ttl_s = ttl_s

    def _path(self, scope: str, key: str) -> Path:
        digest = hashlib.sha256(f"{scope}\0{key}".encode()).hexdigest()[:40]
        return self.folder / f"{scope}-{digest}.json"

    def _read(self, path: Path) -> Remembered | None:
        try:
            return Remembered.model_validate_json(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (ValueError, OSError):
            path.replace(path.with_suffix(f".damaged-{int(time.time())}.json"))
            return None

    def once(self, scope: str, key: str, make: Callable[[], dict[str, Any]]) -> tuple[dict[str, Any], bool]:
        """The answer remembered for `key` (younger than the TTL), else `make()`'s, remembered.

        Returns (answer, reused). If `make` raises, nothing is remembered.
        """
        if not key.strip() or len(key) > MAX_KEY_LENGTH:
            raise UserError(
                f"idempotency_key must be 1 to {MAX_KEY_LENGTH} characters (e.g. a UUID). Nothing was done."
            )
        path = self._path(scope, key)
        with exclusive_lock(path.with_suffix(".lock")):
            prior = self._read(path)
            if prior is not None and prior.key == key and time.time() - prior.created_at < self.ttl_s:
                return prior.answer, True
            answer = make()
            record = Remembered(scope=scope, key=key, created_at=time.time(), answer=answer)
            write_text_atomic(path, record.model_dump_json())
        self._forget_expired()
        return answer, False

    def _forget_expired(self) -> None:
        """Remove records past twice the TTL: no retry can reuse them. (Lock files stay: removing
        one another process may hold would let two holders in.)"""
        cutoff = time.time() - 2 * self.ttl_s
        for old in self.folder.glob("*-*.json"):
            try:
                if ".damaged-" not in old.name and old.stat().st_mtime < cutoff:
                    old.unlink(missing_ok=True)
            except OSError:
                continue  # another server pruned it first
