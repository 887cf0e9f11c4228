"""Runs submitted as Ray jobs to a local Ray head (Ray from PyPI) through a real stdio MCP client.
The job runs the unchanged supervisor; the server speaks to Ray's Jobs REST API only."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from mcp import Client

from mcp_rl.settings import Settings
from mcp_rl.supervisor import service
from tests.cluster.ray_cluster import RayHead
from tests.cluster.test_slurm_runs import start_on, wait_for
from tests.conftest import make_env, stdio_params
from tests.kit.mcp import ok

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


@pytest.fixture(autouse=True)
def _stop_runs_left_by_a_failing_test(home: Path, ray_head: RayHead):
    yield
    settings = Settings.from_env(make_env(home))
    if settings.state_db.exists():
        for run in service.registry_for(settings).list_runs():
            if run.active:
                service.stop_run(settings, run.run_id)


async def test_a_ray_run_completes_then_a_stopped_one_keeps_its_last_checkpoint(
    home: Path, model_dir: Path, ray_head: RayHead
) -> None:
    async with Client(stdio_params(home)) as client:
        await ok(client, "rl_select_environment", {"name": "arithmetic"})
        started = await start_on(client, "ray", ray_address=ray_head.address)
        run_id, job_id = started["run_id"], started["job_id"]
        assert started["launcher"] == "ray" and job_id == f"mcp-rl-{run_id}"
        assert '"RAY_JOB_STOP_WAIT_TIME_S"' in started["submission"]["command"]
        done = await wait_for(client, run_id, lambda s: s["status"] in ("completed", "failed", "stopped"), "ended")
        assert done["status"] == "completed", done
        assert done["scheduler"]["scheduler_state"] in ("SUCCEEDED", "RUNNING"), done
        held_out = done["held_out"]
        assert held_out is not None and held_out["n"] > 0 and held_out["trained_score"] is not None, held_out
        print(f"ray run {run_id}: {held_out['sentence']}")

        stopping = await start_on(
            client, "ray", ray_address=ray_head.address, total_steps=200, save_checkpoint_interval=0
        )
        run_id = stopping["run_id"]
        await wait_for(
            client, run_id, lambda s: s["status"] == "running" and (s["metrics"] or {}).get("step"), "past step 1"
        )
        stopped = await ok(client, "rl_stop_training", {"run_id": run_id})
        if stopped["in_progress"]:
            stopped = await wait_for(client, run_id, lambda s: s["status"] == "stopped", "stopped")
        assert stopped["status"] == "stopped", stopped
        listed = await ok(client, "rl_list_checkpoints", {"run_id": run_id})
        assert any(c["kind"] == "state" and c["exists"] for c in listed["checkpoints"]), listed
        # Ray gave the job its grace (RAY_JOB_STOP_WAIT_TIME_S): the trainer exited by itself.
        status = await ok(client, "rl_check_status", {"run_id": run_id})
        assert status["processes"]["trainer"]["exit_code"] == 0, status
        with httpx.Client(trust_env=False) as http:
            job = http.get(f"{ray_head.address}/api/jobs/{stopping['job_id']}").json()
        assert job["status"] == "STOPPED", job
