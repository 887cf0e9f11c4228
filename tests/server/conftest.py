"""Fixtures of the server tests: both protocol eras, and runs recorded straight in the registry."""

from __future__ import annotations

import time

import pytest

from mcp_rl.settings import Settings
from mcp_rl.supervisor import service
from tests.kit.runs import run_record


@pytest.fixture(params=["auto", "legacy"])
def mode(request) -> str:
    """The client's protocol era: 2026-07-28 (auto) and 2025-11-25 (legacy, today's hosts)."""
    return request.param


def record_run(settings: Settings, run_id: str, created_at: float | None = None) -> None:
    """A run as the registry knows it (starting, nothing running): enough for ids and prompts."""
    run_dir = settings.runs_dir / run_id
    run_dir.mkdir(parents=True)
    (run_dir / "run.yaml").write_text(f"run_id: {run_id}\n")
    when = time.time() if created_at is None else created_at
    service.registry_for(settings).create_run(run_record(run_id, run_dir, created_at=when))
