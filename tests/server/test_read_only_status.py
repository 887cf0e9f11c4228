"""The polling tools are read-only in fact: through a real MCP client, every status read of a
run (rl_check_status twice, rl_list_runs, rl_wait_for_run, rl_read_log, the rl://runs resources)
and every smoke-test read leaves every byte of the state directory as it was."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mcp import Client

from mcp_rl.server import build_server
from mcp_rl.settings import Settings
from mcp_rl.supervisor import service
from mcp_rl.supervisor.states import RunState
from tests.conftest import FIXTURES, make_env
from tests.kit.footprint import state_footprint
from tests.kit.runs import run_record

pytestmark = pytest.mark.anyio


def _record(settings: Settings, run_id: str, state: RunState) -> None:
    registry = service.registry_for(settings)
    run_dir = settings.runs_dir / run_id
    (run_dir / "logs").mkdir(parents=True)
    (run_dir / "run.yaml").write_text(f"run_id: {run_id}\n")
    (run_dir / "logs" / "trainer.log").write_text("step 1\nstep 2\n")
    (run_dir / "metrics.jsonl").write_text(
        "".join(json.dumps({"step": s, "reward/mean": s / 10}) + "\n" for s in (1, 2))
    )
    registry.create_run(run_record(run_id, run_dir))
    registry.transition(run_id, RunState.RUNNING, "ready")
    if state != RunState.RUNNING:
        registry.transition(run_id, state, "done")


async def test_status_reads_write_nothing(home: Path) -> None:
    settings = Settings.from_env(
        make_env(home, MCP_RL_ENV_PATHS=str(FIXTURES / "envs" / "good"), MCP_RL_STATUS_MIN_INTERVAL="1800")
    )
    _record(settings, "done1234", RunState.COMPLETED)
    _record(settings, "live1234", RunState.RUNNING)  # within its launch window: not taken for dead
    async with Client(build_server(settings)) as client:
        await client.list_tools()
        before = state_footprint(home)
        calls = [
            ("rl_check_status", {"run_id": "done1234"}),
            ("rl_check_status", {"run_id": "done1234"}),
            ("rl_check_status", {"run_id": "live1234"}),
            ("rl_check_status", {"run_id": "live1234"}),  # rate-limited: remembered in memory only
            ("rl_list_runs", {}),
            ("rl_wait_for_run", {"run_id": "done1234"}),
            ("rl_wait_for_run", {"run_id": "live1234", "timeout_s": 0.2}),
            ("rl_read_log", {"run_id": "done1234"}),
            ("rl_list_tests", {}),
        ]
        results = [await client.call_tool(name, args) for name, args in calls]
        for uri in ("rl://runs", "rl://runs/done1234", "rl://runs/live1234/metrics"):
            await client.read_resource(uri)
        after = state_footprint(home)
    assert all(not r.is_error for r in results), [r.content[0].text for r in results if r.is_error]
    assert results[3].structured_content["rate_limited"] is True
    assert results[1].structured_content["rate_limited"] is False
    changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
    assert changed == []
