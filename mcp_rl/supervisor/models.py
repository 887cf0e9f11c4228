"""What the run service returns: plain pydantic models, shared by the MCP tools and the CLI."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from mcp_rl.metrics.signal import LearningSignal
from mcp_rl.proof.summary import HeldOutSummary
from mcp_rl.rundir import TrainerPhase
from mcp_rl.supervisor.launchers import JobInfo, Submission
from mcp_rl.supervisor.states import ProcState, RunState


def log_uri(run_id: str, name: str) -> str:
    return f"rl://runs/{run_id}/logs/{name}"


class RunStarted(BaseModel):
    run_id: str
    status: RunState = Field(description="Always 'starting': the processes come up in the background.")
    environment: str
    backend: str
    base_model: str
    num_steps: int
    config_path: str = Field(description="The exact run.yaml given to the run's processes (no secrets).")
    config: dict[str, Any] = Field(description="The environment section of run.yaml.")
    wandb_project: str | None = None
    wandb_run_name: str | None = None
    logs: dict[str, str] = Field(description="Log resources by process: read them with resources/read.")
    status_resource: str
    launcher: str = Field(default="local", description="local, slurm or ray (the launcher run option).")
    job_id: str | None = Field(default=None, description="The scheduler's job id (slurm, ray).")
    submission: Submission | None = Field(
        default=None, description="Exactly what was submitted to the scheduler (no secrets)."
    )
    message: str


class ProcessStatus(BaseModel):
    state: ProcState = Field(default=ProcState.PENDING, description="The recorded state of the process.")
    status: str = Field(description="The state for people: pending | starting | running | exited (N) | stopped (N)")
    pid: int | None = None
    port: int | None = None
    exit_code: int | None = None
    alive: bool = False
    descendants: int | None = Field(
        None,
        description="Live processes it started, counted while it runs (an MCP environment's server processes, "
        "one per episode in play); the run's stop ends them with it.",
    )


class RunMetrics(BaseModel):
    """The latest line of metrics.jsonl, with the headline numbers pulled out."""

    step: int | None = None
    num_steps: int | None = None
    reward_mean: float | None = None
    loss: float | None = None
    percent_correct: float | None = None
    eval_percent_correct: float | None = None
    time: float | None = None
    cost_usd_estimated: float | None = Field(
        None, description="Estimated USD the run has spent so far (0 on the local backend; None: not priced)."
    )
    step_cost_usd_estimated: float | None = Field(None, description="Estimated USD of the latest step.")
    latest: dict[str, Any] = Field(default_factory=dict, description="Every key of the latest metrics line.")


class EnvironmentErrors(BaseModel):
    """Groups the environment failed to turn into scored data (env_health.json)."""

    groups_scored: int
    groups_failed: int
    last_exception: str = Field(description="Type, message and where in the environment's code it was raised.")
    traceback: str = Field(description="The last exception's traceback (its last few thousand characters).")


class RunStatus(BaseModel):
    run_id: str
    status: RunState
    environment: str
    backend: str
    running_time_minutes: float
    cause: str | None = Field(default=None, description="Why the run ended (or what the last change was).")
    error: str | None = Field(default=None, description="The cause, when the run failed.")
    rate_limited: bool = False
    next_check_in_seconds: float | None = None
    processes: dict[str, ProcessStatus] = Field(default_factory=dict)
    environment_errors: EnvironmentErrors | None = Field(
        default=None,
        description="Present when the environment raised on some groups: how many, the last exception and its "
        "traceback. A few bad items do not end a run; the same exception on group after group does.",
    )
    trainer_phase: TrainerPhase | None = Field(
        default=None, description="What the trainer was last doing (trainer_status.json)."
    )
    metrics: RunMetrics | None = None
    learning_signal: LearningSignal | None = Field(
        default=None,
        description="The latest steps' learning signal: share of groups with no signal (all answers the same "
        "reward), share of sampled answers trained on, reward spread; a warning with advice when most groups "
        "carried none for several steps.",
    )
    held_out: HeldOutSummary | None = Field(
        default=None,
        description="Did it learn? The base (first evaluation) against the latest evaluation on the same held-out "
        "items: scores, difference with its 95 % interval, p of the paired test, and one sentence.",
    )
    held_out_note: str | None = Field(
        default=None, description="Why held_out is null and exactly what to do about it (None when it is given)."
    )
    wandb_project: str | None = None
    wandb_run_name: str | None = None
    wandb_url: str | None = None
    ports: dict[str, int | None] = Field(default_factory=dict)
    logs: dict[str, str] = Field(default_factory=dict)
    config_path: str | None = None
    launcher: str = "local"
    scheduler: JobInfo | None = Field(
        default=None, description="slurm/ray runs: the job's state and reason as the scheduler reports them."
    )
    checkpoints_disk_mb: float | None = Field(
        None,
        description="Disk used by the run's local checkpoints (MB); retention keeps the final, the kept and the "
        "last keep_last_checkpoints. rl_list_checkpoints shows each one.",
    )
    created_at: float
    ended_at: float | None = None
    message: str
    notes: list[str] = Field(
        default_factory=list, description="Damaged records of the run (shown as far as readable) and repairs made."
    )


class RunSummary(BaseModel):
    run_id: str
    environment: str
    status: RunState
    backend: str
    created_at: float
    running_time_minutes: float
    step: int | None = None
    latest_reward: float | None = None
    wandb_run_name: str | None = None
    cause: str | None = None


class RunList(BaseModel):
    runs: list[RunSummary]
    count: int
    notes: list[str] = Field(
        default_factory=list,
        description="Ended runs whose processes are still being ended, anything left alone, and repairs of the "
        "run registry (a damaged state.db rebuilt, rows skipped).",
    )


class StopResult(BaseModel):
    run_id: str
    status: RunState
    message: str
    was_running: bool = Field(description="False when the run had already ended (nothing was done).")
    in_progress: bool = Field(
        default=False,
        description="True when the stop continues in the background: poll rl_check_status until 'stopped'.",
    )
    processes_left: list[int] = Field(
        default_factory=list, description="pids of the run still alive (should be empty)."
    )
    ports_in_use: list[int] = Field(default_factory=list, description="ports of the run still held (should be empty).")
    left_alone: list[str] = Field(
        default_factory=list,
        description="Processes at a recorded pid that could not be proven to be the run's: never signalled.",
    )


# rl_stop_training's answer (no docstring: it would become the tool's output schema description).
class StopAnswer(StopResult):
    in_progress: bool = Field(
        False,
        description="True: the stop goes on in the background; call rl_stop_training(run_id) again to collect it.",
    )
    stopping_for_s: float | None = None


class Cleanup(BaseModel):
    """What ending a run's leftover processes did."""

    ended: list[int] = Field(default_factory=list, description="pids of the run that were signalled and ended.")
    still_alive: list[int] = Field(default_factory=list, description="pids of the run still alive after SIGKILL.")
    left_alone: list[str] = Field(
        default_factory=list,
        description="Processes at a recorded pid that could not be proven to be the run's, so were never signalled.",
    )


class ReconcileReport(BaseModel):
    checked: int
    failed: list[str] = Field(default_factory=list, description="Runs whose supervisor was gone, now failed.")
    stopped: list[str] = Field(default_factory=list, description="Runs being stopped whose supervisor was gone.")
    cleaned: list[str] = Field(default_factory=list, description="Ended runs whose leftover processes were ended.")
