"""The launchers against a real single-node Slurm cluster (a job of a few seconds, no training),
and the checks that refuse a job before anything is written."""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import subprocess
from pathlib import Path

import pytest

from mcp_rl.config import RunOptions
from mcp_rl.errors import UserError
from mcp_rl.ports import allocate_ports
from mcp_rl.supervisor.launchers import JobState, Resources, job_info, launcher_for
from mcp_rl.supervisor.launchers.ray import RayLauncher
from mcp_rl.supervisor.launchers.slurm import SlurmLauncher
from tests.cluster.slurm_cluster import SlurmCluster
from tests.kit.wait import WaitTimeout, wait_for


@pytest.fixture
def slurm_env(slurm_cluster: SlurmCluster, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    for name, value in slurm_cluster.env().items():
        monkeypatch.setenv(name, value)
    return dict(os.environ)


def _wait_state(job_id: str, wanted: set[JobState], deadline_s: float = 120.0) -> JobState:
    """The job's state once it is one of `wanted`; the state it has at the deadline otherwise."""
    with contextlib.suppress(WaitTimeout):
        wait_for(lambda: job_info("slurm", job_id, fresh=True).state in wanted, deadline_s, "the job", interval=0.2)
    return job_info("slurm", job_id, fresh=True).state


def test_the_batch_script_carries_the_resources_and_the_gentle_stop(tmp_path: Path) -> None:
    resources = Resources(gpus=2, partition="gpu", account="lab", time_limit_minutes=90)
    submission = SlurmLauncher().prepare("abc123", tmp_path, resources, grace_s=150.5)
    script = submission.script or ""
    for line in (
        "#SBATCH --partition=gpu",
        "#SBATCH --account=lab",
        "#SBATCH --time=90",
        "#SBATCH --gres=gpu:2",
        "#SBATCH --signal=B:TERM@151",
    ):
        assert line in script.splitlines()
    # The paths go on sbatch's argv, not into #SBATCH lines (sbatch's own quoting there).
    assert f"--output={tmp_path}/logs/supervisor.log" in shlex.split(submission.command)
    assert script.rstrip().endswith(f"-m mcp_rl.supervisor --run-dir {tmp_path}")
    assert not list(tmp_path.iterdir())  # prepared, nothing written


def test_slurm_refuses_a_partition_it_does_not_have_before_anything_is_submitted(
    slurm_env: dict[str, str], tmp_path: Path
) -> None:
    launcher = SlurmLauncher()
    submission = launcher.prepare("r1", tmp_path, Resources(partition="nope"), grace_s=60)
    with pytest.raises(UserError, match="invalid partition"):
        launcher.dry_run(submission, slurm_env)
    launcher.dry_run(launcher.prepare("r1", tmp_path, Resources(), grace_s=60), slurm_env)


def test_a_slurm_job_is_submitted_stopped_gently_and_read_back(
    slurm_env: dict[str, str], slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    launcher = SlurmLauncher()
    (tmp_path / "logs").mkdir()
    submission = launcher.prepare("r2", tmp_path, Resources(), grace_s=60)
    # A stand-in for the supervisor: says when TERM came and exits 0 (as a supervisor that stopped).
    submission = submission.model_copy(
        update={
            "script": "#!/bin/bash\n"
            f"#SBATCH --output={tmp_path}/logs/supervisor.log\n"
            "trap 'echo got TERM; exit 0' TERM\necho started\nwhile true; do sleep 0.2; done\n"
        }
    )
    job_id = launcher.submit(submission, tmp_path, slurm_env)
    assert _wait_state(job_id, {JobState.RUNNING}) == JobState.RUNNING
    # Slurm says RUNNING before the script has set its trap: signal once it has.
    log = tmp_path / "logs" / "supervisor.log"
    with contextlib.suppress(WaitTimeout):  # the job's end below says whether the signal was heard
        wait_for(lambda: log.exists() and "started" in log.read_text(), 120, "the job's script", interval=0.2)
    launcher.request_stop(job_id)
    assert _wait_state(job_id, {JobState.COMPLETED, JobState.CANCELLED, JobState.FAILED}) == JobState.COMPLETED
    assert "got TERM" in (tmp_path / "logs" / "supervisor.log").read_text()


def test_a_job_cancelled_from_outside_reads_cancelled_with_its_signal(
    slurm_env: dict[str, str], slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    launcher = SlurmLauncher()
    submission = launcher.prepare("r3", tmp_path, Resources(), grace_s=60)
    submission = submission.model_copy(update={"script": "#!/bin/bash\n#SBATCH --output=/dev/null\nsleep 300\n"})
    job_id = launcher.submit(submission, tmp_path, slurm_env)
    assert _wait_state(job_id, {JobState.RUNNING}) == JobState.RUNNING
    slurm_cluster.scancel(job_id)
    assert _wait_state(job_id, {JobState.CANCELLED}) == JobState.CANCELLED
    info = job_info("slurm", job_id)
    assert info.scheduler_state == "CANCELLED" and info.ended
    assert f"slurm job {job_id} is CANCELLED" in info.sentence()


def test_a_ray_address_nobody_answers_is_refused_in_words() -> None:
    (port,) = allocate_ports(1)
    with pytest.raises(UserError, match="ray start --head"):
        launcher_for("ray", f"http://127.0.0.1:{port}").check(Resources())


def test_cluster_options_are_checked_as_run_options() -> None:
    base = {
        "base_model": "default",
        "total_steps": 1,
        "batch_size": 8,
        "lora_rank": 8,
        "learning_rate": 1e-4,
        "adam_beta1": 0.9,
        "adam_beta2": 0.95,
        "max_token_trainer_length": 512,
        "save_checkpoint_interval": 0,
        "wandb_project": "p",
    }
    for bad in (
        {"launcher": "kubernetes"},
        {"partition": "a b"},
        {"ray_address": "127.0.0.1:8265"},
        {"cluster_venv": "relative/venv"},
        {"gpus": True},
        {"time_limit_minutes": 0},
    ):
        with pytest.raises(ValueError):
            RunOptions.model_validate({**base, **bad})
    ok = RunOptions.model_validate({**base, "launcher": "slurm", "partition": "gpu", "gpus": 1})
    assert ok.launcher == "slurm" and ok.gpus == 1


def test_a_shell_word_in_the_state_folder_never_runs_in_a_generated_script(tmp_path: Path) -> None:
    """Issue 43 item 7: MCP_RL_HOME holding `$(...)`, quotes, '#', '%' and spaces. The Ray entrypoint
    and the Slurm script are run by bash here with a stand-in interpreter: nothing in the path
    runs, and the supervisor gets the path and its log exactly."""
    marker = tmp_path / "PWNED"
    run_dir = tmp_path / f"home $(touch {marker}) `touch {marker}` 'q' \"d\" #x %j" / "runs" / "r1"
    (run_dir / "logs").mkdir(parents=True)
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text('#!/bin/sh\nprintf "%s\\n" "$PWD" "$@"\n')
    (venv / "bin" / "python").chmod(0o755)
    resources = Resources(cluster_venv=str(venv))

    ray = RayLauncher("http://127.0.0.1:8265").prepare("r1", run_dir, resources, grace_s=10)
    entrypoint = json.loads(ray.script or "{}")["entrypoint"]
    subprocess.run(["bash", "-c", entrypoint], check=True, timeout=30)
    log = (run_dir / "logs" / "supervisor.log").read_text().splitlines()
    assert log == [str(run_dir), "-m", "mcp_rl.supervisor", "--run-dir", str(run_dir)]

    slurm = SlurmLauncher().prepare("r1", run_dir, resources, grace_s=10)
    script = tmp_path / "job.sh"
    script.write_text(slurm.script or "")
    out = subprocess.run(["bash", str(script)], capture_output=True, text=True, check=True, timeout=30)
    assert out.stdout.splitlines()[1:] == ["-m", "mcp_rl.supervisor", "--run-dir", str(run_dir)]
    argv = shlex.split(slurm.command)
    assert f"--chdir={run_dir}" in argv and f"--output={run_dir}/logs/supervisor.log".replace("%", "%%") in argv
    assert not marker.exists()
