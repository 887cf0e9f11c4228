"""The one interface of the cluster launchers (types and the job's command); see the package."""

from __future__ import annotations

import shlex
import sys
from enum import StrEnum
from pathlib import Path
from typing import Literal, Protocol

from pydantic import BaseModel, Field

LauncherName = Literal["local", "slurm", "ray"]
LAUNCHERS: tuple[LauncherName, ...] = ("local", "slurm", "ray")
# A file in the run folder: what was submitted (no secrets), for people and for a rebuilt registry.
SUBMISSION_FILE = "submission.json"
# How long one answer of a scheduler is reused (the server's watcher asks every second).
JOB_INFO_TTL_S = 2.0
# A cluster job's grace after a gentle stop, beyond the supervisor's own full stop time.
JOB_STOP_MARGIN_S = 30.0


class JobState(StrEnum):
    PENDING = "pending"
    """Queued: waiting for resources or priority (the reason says which)."""
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    """Ended by the scheduler or the node (time limit, node failure, out of memory, exit != 0)."""
    CANCELLED = "cancelled"
    """Cancelled (by rl_stop_training, or by someone from outside)."""
    GONE = "gone"
    """The scheduler no longer knows the job: it ended long enough ago to be forgotten."""
    UNKNOWN = "unknown"
    """The scheduler could not be asked (the reason says why); asked again on the next read."""


ENDED_JOB_STATES = frozenset({JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED, JobState.GONE})


class JobInfo(BaseModel):
    launcher: str
    job_id: str
    state: JobState
    scheduler_state: str = Field(description="The scheduler's own word for the job's state.")
    reason: str | None = Field(default=None, description="The scheduler's reason (why pending, why it ended).")

    @property
    def ended(self) -> bool:
        return self.state in ENDED_JOB_STATES

    def sentence(self) -> str:
        text = f"{self.launcher} job {self.job_id} is {self.scheduler_state}"
        return text + (f" ({self.reason})" if self.reason else "")


class Resources(BaseModel):
    """The run options a cluster job is submitted with (checked before submitting)."""

    gpus: int = 0
    partition: str | None = None
    account: str | None = None
    time_limit_minutes: int | None = None
    ray_address: str | None = None
    cluster_venv: str | None = None


class Submission(BaseModel):
    launcher: str
    job_id: str | None = None
    command: str = Field(description="The exact submission, as a shell command or an HTTP request.")
    script: str | None = Field(default=None, description="The batch script submitted (Slurm).")
    python: str = Field(description="The interpreter the job runs the supervisor with, on the cluster.")
    address: str | None = Field(
        default=None, description="Where the scheduler is asked (Ray's dashboard address); None: this machine's."
    )


class ClusterLauncher(Protocol):
    name: str
    address: str | None  # where the scheduler is asked, when it is not this machine's default

    def check(self, resources: Resources) -> None:
        """Raise UserError naming the option when the scheduler cannot take the job; submits nothing."""

    def prepare(self, run_id: str, run_dir: Path, resources: Resources, grace_s: float) -> Submission:
        """The submission (written down and shown before it is sent)."""

    def dry_run(self, submission: Submission, env: dict[str, str]) -> None:
        """Ask the scheduler whether it would take the submission (UserError if not); submits nothing."""

    def submit(self, submission: Submission, run_dir: Path, env: dict[str, str]) -> str:
        """Send it; returns the job id. Raises LaunchError with the scheduler's words."""

    def info(self, job_id: str) -> JobInfo:
        """The job's state from the scheduler."""

    def request_stop(self, job_id: str) -> None:
        """Ask the job to stop gently (SIGTERM to the supervisor; no kill yet)."""

    def kill(self, job_id: str) -> None:
        """End the job now."""


def supervisor_python(resources: Resources) -> str:
    """The same interpreter as this server (the same package at the same path on a shared
    filesystem), or the venv named by the `cluster_venv` run option."""
    if resources.cluster_venv:
        return str(Path(resources.cluster_venv) / "bin" / "python")
    return sys.executable


def supervisor_command(python: str, run_dir: Path) -> str:
    return f"cd {shlex.quote(str(run_dir))} && exec {shlex.quote(python)} -m mcp_rl.supervisor --run-dir {shlex.quote(str(run_dir))}"
