"""Bench: the length monitor on a real run, through a real stdio client (issue 44).

A task whose training reward pays for length (tests/fixtures/tasks/longer_pays.py: min(1,
characters / 240), while its held-out items are scored for the exact answer) is trained 10 steps
(batch 16, four groups of 4); rl_check_status and rl_get_results must then warn that the answers
grew longer while the held-out score did not rise, with the numbers and advice. Ten steps: the
monitor's windows are 5 + 5 (the smallest p 1/252). With 8 (4 + 4, the fewest it calls) it fired,
but at p = 0.04: the few-shot examples hold the answers short for the first steps, then they grow
(measured 11, 12, 12, 21, 16, 18, 30 ... tokens).

This was a slow-tier test (170 s on 2 cores); the model learning to write longer answers is a
learning claim, so it lives here; the fast tier holds the tools' wiring to the same files
(tests/metrics/test_monitors.py). Exit 0 when the warning fires as described.

    flock /tmp/mcp-rl-heavy.lock .venv/bin/python bench/bench_length_monitor.py

Measured 2026-11-28 on 2 cores as the slow test: completed in 170 s, the warning fired.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from mcp import Client

from mcp_rl.models import resolve_model
from mcp_rl.rundir import COMPLETION_TOKENS_KEY, METRICS_FILE
from mcp_rl.settings import Settings
from mcp_rl.supervisor import service
from tests.conftest import make_env, stdio_params
from tests.kit.mcp import ok
from tests.kit.runs import TEST_HELD_OUT_LIMIT

FIXTURE = REPO / "tests" / "fixtures" / "tasks" / "longer_pays.py"
RUN_DEADLINE_S = 900.0
STEPS = 10
BATCH = 16


async def bench(work: Path, model: Path) -> list[str]:
    """The run; the list of what did not hold (empty: the monitor warned as it should)."""
    home, envs = work / "home", work / "envs"
    home.mkdir()
    envs.mkdir()
    shutil.copy(FIXTURE, envs / FIXTURE.name)
    extra = {"MCP_RL_MODEL": str(model), "MCP_RL_ENV_PATHS": str(envs), "PYTHONPATH": str(REPO)}
    settings = Settings.from_env(make_env(home, **extra))
    run_id = ""
    began = time.monotonic()
    try:
        async with Client(stdio_params(home, **extra)) as client:
            await ok(client, "rl_select_environment", {"name": "longer_pays"})
            edits = {"total_steps": STEPS, "batch_size": BATCH, "held_out_limit": TEST_HELD_OUT_LIMIT}
            for field, value in edits.items():
                await ok(client, "rl_edit_config", {"field": field, "value": value})
            run_id = (await ok(client, "rl_start_training"))["run_id"]
            status: dict[str, Any] = {}
            while time.monotonic() < began + RUN_DEADLINE_S:
                status = await ok(client, "rl_check_status", {"run_id": run_id})
                if status["status"] in ("completed", "failed", "stopped") and not status.get("rate_limited"):
                    break
                await asyncio.sleep(2.0)
            if status.get("status") != "completed":
                return [f"the run did not complete: {status}"]
            run_dir = Path(service.registry_for(settings).get_run(run_id).run_dir)
            lines = [json.loads(line) for line in (run_dir / METRICS_FILE).read_text().splitlines() if line.strip()]
            lengths = [(r["step"], round(r[COMPLETION_TOKENS_KEY], 1)) for r in lines if COMPLETION_TOKENS_KEY in r]
            print(f"completion tokens by step: {lengths}")
            print(f"held-out: {status['held_out']['sentence']}")
            print(f"{time.monotonic() - began:.0f} s start to figures")
            fired = {m["monitor"]: m for m in status["learning_signal"]["monitors"]}
            if "length_drift" not in fired:
                return [f"no length_drift warning: {status['learning_signal']}"]
            warning = fired["length_drift"]["warning"]
            print(f"warning: {warning}")
            wanted = (
                "Answers are getting longer while the held-out score does not rise",
                "steps 1-5",
                "steps 6-10",
                "permutation test",
                f"{TEST_HELD_OUT_LIMIT} held-out items",
                "McNemar",
            )
            failed = [f"the warning lacks {words!r}" for words in wanted if words not in warning]
            if warning not in status["message"]:
                failed.append("rl_check_status's message lacks the warning")
            results = await ok(client, "rl_get_results", {"run_id": run_id})
            said = [m["warning"] for m in results["learning_signal"]["monitors"] if m["monitor"] == "length_drift"]
            if said != [warning]:
                failed.append(f"rl_get_results says {said}")
            return failed
    finally:
        record = service.registry_for(settings).get_run(run_id) if run_id else None
        if record is not None and record.active:
            service.stop_run(settings, run_id)


def main() -> int:
    model = resolve_model(Settings.from_env(), "default")
    work = Path(tempfile.mkdtemp(prefix="mcp-rl-bench-length-"))
    try:
        failed = asyncio.run(bench(work, model))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for line in failed:
        print(f"FAILED: {line}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
