"""Slurm: one batch job per run, through `sbatch`, `scontrol`, `scancel` (any Slurm >= 20).

The batch script `exec`s the supervisor, so the job's batch step is the supervisor and its three
children. A stop is `scancel --batch --signal=TERM`: a TERM and no kill (a plain `scancel` kills
after the cluster's KillWait, 30 s by default, shorter than the trainer's checkpoint grace); the
stopper ends the job with a plain `scancel` once the grace is over. `--signal=B:TERM@N` asks for
the same gentle stop N seconds before the time limit.
"""

from __future__ import annotations

import math
import re
import shlex
import shutil
import subprocess
from pathlib import Path

from mcp_rl.errors import LaunchError, UserError
from mcp_rl.supervisor.launchers.base import (
    JobInfo,
    JobState,
    Resources,
    Submission,
    supervisor_command,
    supervisor_python,
)

COMMAND_TIMEOUT_S = 20.0
SCRIPT_NAME = "slurm_job.sh"
_STATES = {
    "PENDING": JobState.PENDING,
    "CONFIGURING": JobState.PENDING,
    "REQUEUED": JobState.PENDING,
    "RESV_DEL_HOLD": JobState.PENDING,
    "REQUEUE_HOLD": JobState.PENDING,
    "RUNNING": JobState.RUNNING,
    "COMPLETING": JobState.RUNNING,
    "SUSPENDED": JobState.RUNNING,
    "STOPPED": JobState.RUNNING,
    "SIGNALING": JobState.RUNNING,
    "STAGE_OUT": JobState.RUNNING,
    "RESIZING": JobState.RUNNING,
    "COMPLETED": JobState.COMPLETED,
    "CANCELLED": JobState.CANCELLED,
}  # everything else (FAILED, TIMEOUT, NODE_FAIL, OUT_OF_MEMORY, BOOT_FAIL, DEADLINE, PREEMPTED): failed


def _run(argv: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S, env=env, check=False)
    except FileNotFoundError as exc:
        raise LaunchError(f"{argv[0]} is not on PATH: this machine is not a Slurm submit host") from exc
    except subprocess.TimeoutExpired as exc:
        raise LaunchError(f"{argv[0]} did not answer within {COMMAND_TIMEOUT_S:g} s (is slurmctld up?)") from exc


def _paths(run_dir: Path) -> list[str]:
    """The job's log and working folder as sbatch arguments (an argv: no shell, no #SBATCH
    parsing). `%` is doubled: sbatch reads `%j` and the like in --output as patterns."""
    log = str(run_dir / "logs" / "supervisor.log").replace("%", "%%")
    return [f"--output={log}", f"--chdir={run_dir}"]


def _words(result: subprocess.CompletedProcess[str]) -> str:
    return " ".join((result.stderr or result.stdout or "").split())[:500] or f"exit status {result.returncode}"


class SlurmLauncher:
    name = "slurm"
    address: str | None = None  # sbatch finds the cluster itself (slurm.conf, SLURM_CONF)

    def check(self, resources: Resources) -> None:
        if shutil.which("sbatch") is None:
            raise UserError(
                "launcher is 'slurm' but sbatch is not on this machine's PATH: run the MCP server on a Slurm "
                "submit host, or rl_edit_config('launcher', 'local')."
            )
        if resources.ray_address:
            raise UserError(
                "ray_address is set but launcher is 'slurm'; clear it with rl_edit_config('ray_address', null)."
            )

    def prepare(self, run_id: str, run_dir: Path, resources: Resources, grace_s: float) -> Submission:
        python = supervisor_python(resources)
        lines = [
            "#!/bin/bash",
            f"#SBATCH --job-name=mcp-rl-{run_id}",
            # --output and --chdir go on sbatch's argv (_paths), never into these lines: sbatch
            # reads them with its own quoting, where a path's '#', '"' or space would change them.
            "#SBATCH --open-mode=append",
            "#SBATCH --nodes=1",
            "#SBATCH --ntasks=1",
            # A gentle stop before the time limit: the supervisor alone gets TERM, with the grace
            # its trainer needs for a final checkpoint.
            f"#SBATCH --signal=B:TERM@{math.ceil(grace_s)}",
        ]
        if resources.partition:
            lines.append(f"#SBATCH --partition={resources.partition}")
        if resources.account:
            lines.append(f"#SBATCH --account={resources.account}")
        if resources.time_limit_minutes:
            lines.append(f"#SBATCH --time={resources.time_limit_minutes}")
        if resources.gpus:
            lines.append(f"#SBATCH --gres=gpu:{resources.gpus}")
        lines.append(supervisor_command(python, run_dir))
        script = "\n".join(lines) + "\n"
        script_path = run_dir / SCRIPT_NAME
        return Submission(
            launcher=self.name,
            command=shlex.join(["sbatch", "--parsable", "--export=ALL", *_paths(run_dir), str(script_path)]),
            script=script,
            python=python,
        )

    def _script(self, submission: Submission, run_dir: Path) -> Path:
        path = run_dir / SCRIPT_NAME
        path.write_text(submission.script or "", encoding="utf-8")
        return path

    def dry_run(self, submission: Submission, env: dict[str, str]) -> None:
        """`sbatch --test-only`: the scheduler checks partition, account, time and GPUs and submits
        nothing (the script on standard input: nothing is written)."""
        try:
            result = subprocess.run(
                ["sbatch", "--test-only"],
                input=submission.script,
                capture_output=True,
                text=True,
                timeout=COMMAND_TIMEOUT_S,
                env=env,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise UserError(f"sbatch --test-only could not be run ({exc}); is slurmctld up?") from exc
        if result.returncode != 0:
            raise UserError(
                f"Slurm would refuse this job: {_words(result)}. Fix the run options (partition, account, "
                "time_limit_minutes, gpus) with rl_edit_config."
            )

    def submit(self, submission: Submission, run_dir: Path, env: dict[str, str]) -> str:
        # The job's environment is this server's (secrets included, as for a local run): sent to
        # slurmctld by sbatch, never written into the script or shown.
        script = str(self._script(submission, run_dir))
        # --output names a file in logs/: slurmd cannot create its folder, and a job whose
        # output cannot be opened fails before its first line.
        (run_dir / "logs").mkdir(parents=True, exist_ok=True)
        result = _run(["sbatch", "--parsable", "--export=ALL", *_paths(run_dir), script], env)
        job_id = (result.stdout or "").strip().split(";")[0]
        if result.returncode != 0 or not job_id.isdigit():
            raise LaunchError(f"sbatch refused the job: {_words(result)}")
        return job_id

    def info(self, job_id: str) -> JobInfo:
        result = _run(["scontrol", "show", "job", "--oneliner", job_id])
        if result.returncode != 0:
            words = _words(result)
            if "Invalid job id" in words:
                return JobInfo(
                    launcher=self.name,
                    job_id=job_id,
                    state=JobState.GONE,
                    scheduler_state="gone",
                    reason="Slurm no longer knows the job (it ended more than MinJobAge ago)",
                )
            raise LaunchError(f"scontrol show job {job_id}: {words}")
        fields = dict(re.findall(r"(\w+)=(\S*)", result.stdout))
        raw = fields.get("JobState", "UNKNOWN")
        state = _STATES.get(raw, JobState.FAILED)
        reason = fields.get("Reason")
        reason = None if reason in (None, "None", "(null)") else reason
        code = fields.get("ExitCode")
        if state in (JobState.FAILED, JobState.CANCELLED, JobState.COMPLETED) and code and code != "0:0":
            reason = f"{reason}; exit code {code}" if reason else f"exit code {code} (status:signal)"
        return JobInfo(launcher=self.name, job_id=job_id, state=state, scheduler_state=raw, reason=reason)

    def request_stop(self, job_id: str) -> None:
        result = _run(["scancel", "--batch", "--signal=TERM", job_id])
        if result.returncode != 0:
            raise LaunchError(f"scancel --batch --signal=TERM {job_id}: {_words(result)}")

    def kill(self, job_id: str) -> None:
        result = _run(["scancel", job_id])
        if result.returncode != 0:
            raise LaunchError(f"scancel {job_id}: {_words(result)}")
