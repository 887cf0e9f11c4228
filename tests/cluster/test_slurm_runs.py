"""Runs submitted to a real Slurm cluster (Debian's slurm-wlm, one node on this machine) through
a real stdio MCP client: the job runs the unchanged supervisor, which brings up the run's three
processes on the node; the server takes the job's state from Slurm."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from mcp_rl.settings import Settings
from mcp_rl.supervisor import service
from tests.cluster.slurm_cluster import SlurmCluster
from tests.conftest import make_env, stdio_params
from tests.kit.mcp import SHORT_RUN, ok

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

RUN_DEADLINE_S = 900.0


@pytest.fixture(autouse=True)
def _stop_runs_left_by_a_failing_test(home: Path, slurm_cluster: SlurmCluster):
    yield
    settings = Settings.from_env(make_env(home))
    if settings.state_db.exists():
        for run in service.registry_for(settings).list_runs():
            if run.active:
                service.stop_run(settings, run.run_id)
            if run.job_id:
                slurm_cluster.scancel(run.job_id)


async def start_on(client: Client, launcher: str, **overrides: Any) -> dict[str, Any]:
    await ok(client, "rl_select_environment", {"name": "arithmetic"})
    for field, value in {**SHORT_RUN, "launcher": launcher, **overrides}.items():
        await ok(client, "rl_edit_config", {"field": field, "value": value})
    return await ok(client, "rl_start_training")


async def wait_for(client: Client, run_id: str, until: Any, what: str, ended_ok: bool = False) -> dict[str, Any]:
    """Poll until `until(status)`; a run that ends first fails the test at once (unless `ended_ok`)."""
    end = time.monotonic() + RUN_DEADLINE_S
    status: dict[str, Any] = {}
    while time.monotonic() < end:
        status = await ok(client, "rl_check_status", {"run_id": run_id})
        if until(status):
            return status
        if status["status"] in ("completed", "failed", "stopped") and not ended_ok:
            pytest.fail(f"run {run_id} ended {status['status']} ({status.get('cause')}), not {what}")
        await anyio.sleep(1.0)
    pytest.fail(f"run {run_id}: not {what} after {RUN_DEADLINE_S} s; last status: {status}")


async def test_a_slurm_run_completes_with_held_out_figures(
    home: Path, model_dir: Path, slurm_cluster: SlurmCluster
) -> None:
    async with Client(stdio_params(home, **slurm_cluster.env())) as client:
        started = await start_on(client, "slurm")
        run_id, job_id = started["run_id"], started["job_id"]
        assert started["launcher"] == "slurm" and job_id and job_id.isdigit()
        script = started["submission"]["script"]
        assert f"--run-dir {Path(started['config_path']).parent}" in script and "#SBATCH --signal=B:TERM@" in script
        assert started["submission"]["command"].startswith("sbatch --parsable --export=ALL ")
        assert f"JobId={job_id}" in slurm_cluster.scontrol("show", "job", job_id)
        done = await wait_for(client, run_id, lambda s: s["status"] in ("completed", "failed", "stopped"), "ended")
        assert done["status"] == "completed", done
        assert done["launcher"] == "slurm" and done["scheduler"]["job_id"] == job_id
        assert done["metrics"]["step"] == 2
        held_out = done["held_out"]
        assert held_out is not None and held_out["n"] > 0 and held_out["trained_score"] is not None, held_out
        print(f"slurm run {run_id}: {held_out['sentence']}")
        # The supervisor's log is the job's output: Slurm wrote it into the run folder.
        log = (await client.read_resource(f"rl://runs/{run_id}/logs/supervisor")).contents[0].text
        assert "completed" in log


async def test_a_slurm_run_stopped_through_rl_stop_training_keeps_its_last_checkpoint(
    home: Path, model_dir: Path, slurm_cluster: SlurmCluster
) -> None:
    async with Client(stdio_params(home, **slurm_cluster.env())) as client:
        started = await start_on(client, "slurm", total_steps=200, save_checkpoint_interval=0)
        run_id = started["run_id"]
        await wait_for(
            client, run_id, lambda s: s["status"] == "running" and (s["metrics"] or {}).get("step"), "past step 1"
        )
        stopped = await ok(client, "rl_stop_training", {"run_id": run_id})
        final = stopped
        if stopped["in_progress"]:
            final = await wait_for(client, run_id, lambda s: s["status"] == "stopped", "stopped")
        assert final["status"] == "stopped", final
        listed = await ok(client, "rl_list_checkpoints", {"run_id": run_id})
        assert listed["checkpoints"], listed
        assert any(c["kind"] == "state" and c["exists"] for c in listed["checkpoints"]), listed
        status = await ok(client, "rl_check_status", {"run_id": run_id})
        assert status["scheduler"]["state"] in ("cancelled", "completed"), status
        assert "from outside" not in (status["cause"] or "")


async def test_a_slurm_job_cancelled_from_outside_reads_so_with_the_schedulers_reason(
    home: Path, model_dir: Path, slurm_cluster: SlurmCluster
) -> None:
    async with Client(stdio_params(home, **slurm_cluster.env())) as client:
        started = await start_on(client, "slurm", total_steps=200)
        run_id, job_id = started["run_id"], started["job_id"]
        await wait_for(client, run_id, lambda s: s["status"] == "running", "running")
        slurm_cluster.scancel(job_id)  # from outside mcp-rl: TERM now, KILL after KillWait
        ended = await wait_for(client, run_id, lambda s: s["status"] in ("failed", "stopped"), "ended")
        await anyio.sleep(0)
        final = await wait_for(
            client,
            run_id,
            lambda s: s["scheduler"] and s["scheduler"]["state"] == "cancelled",
            "cancelled in Slurm",
            ended_ok=True,
        )
        assert final["status"] == ended["status"]
        assert f"ended from outside mcp-rl: slurm job {job_id} is CANCELLED" in final["cause"], final
