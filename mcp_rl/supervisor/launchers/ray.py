"""Ray: one Ray job per run, through the Jobs REST API of the cluster's dashboard (the API that
`ray job submit` and `JobSubmissionClient` speak), so the MCP server needs no Ray of its own.

The entrypoint `exec`s the supervisor on a node of the cluster. Ray's stop sends SIGTERM to the
entrypoint's whole process tree and SIGKILL after `RAY_JOB_STOP_WAIT_TIME_S` (3 s by default:
too short for a final checkpoint), so each job carries a grace of its own in its runtime_env.
Secrets are never put in the runtime_env (Ray keeps it in its GCS and shows it in the dashboard):
a job that needs keys (Tinker, W&B) finds them in the environment of the cluster's own nodes.
"""

from __future__ import annotations

import json
import math
import re
import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mcp_rl.errors import LaunchError, UserError
from mcp_rl.settings import SECRET_ENV_VARS
from mcp_rl.supervisor.launchers.base import (
    JobInfo,
    JobState,
    Resources,
    Submission,
    supervisor_command,
    supervisor_python,
)

if TYPE_CHECKING:  # httpx (and the rich it pulls in) is imported when a Ray run is used, not at every start
    import httpx

DEFAULT_ADDRESS = "http://127.0.0.1:8265"
REQUEST_TIMEOUT_S = 15.0
# What of this server's environment a job gets: mcp-rl's own settings and the libraries' switches
# the run's processes read; never a secret, never PATH or HOME (those are the node's).
_PASSED = re.compile(r"^(MCP_RL_|HF_|HUGGINGFACE_|TRANSFORMERS_|WANDB_|TOKENIZERS_|OMP_|MKL_|TORCH)")
_STATES = {
    "PENDING": JobState.PENDING,
    "RUNNING": JobState.RUNNING,
    "SUCCEEDED": JobState.COMPLETED,
    "STOPPED": JobState.CANCELLED,
    "FAILED": JobState.FAILED,
}


def job_env(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if _PASSED.match(k) and k not in SECRET_ENV_VARS}


class RayLauncher:
    name = "ray"

    def __init__(self, address: str | None = None) -> None:
        self.address: str | None = (address or DEFAULT_ADDRESS).rstrip("/")

    def _request(self, method: str, path: str, body: dict[str, Any] | None = None) -> httpx.Response:
        import httpx  # only when a Ray run uses it: with the rich it pulls in, ~0.3 s of every start

        try:
            # Never through a proxy: the dashboard is the cluster's, named by the user.
            with httpx.Client(timeout=REQUEST_TIMEOUT_S, trust_env=False) as client:
                return client.request(method, f"{self.address}{path}", json=body)
        except httpx.HTTPError as exc:
            raise LaunchError(
                f"Ray's dashboard at {self.address} did not answer ({type(exc).__name__}: {exc})"
            ) from exc

    def check(self, resources: Resources) -> None:
        if resources.partition or resources.account or resources.time_limit_minutes:
            raise UserError(
                "partition, account and time_limit_minutes are Slurm options; launcher is 'ray'. Clear them with "
                "rl_edit_config (value null)."
            )
        try:
            answer = self._request("GET", "/api/version")
        except LaunchError as exc:
            raise UserError(
                f"launcher is 'ray' but {exc}. Start the cluster (`ray start --head`) or set ray_address with "
                "rl_edit_config."
            ) from exc
        if answer.status_code != 200:
            raise UserError(
                f"{self.address}/api/version answered {answer.status_code}: is ray_address a Ray dashboard?"
            )

    def prepare(self, run_id: str, run_dir: Path, resources: Resources, grace_s: float) -> Submission:
        python = supervisor_python(resources)
        log = run_dir / "logs" / "supervisor.log"
        # A shell on the cluster runs this line: every path in it quoted.
        entrypoint = f"{supervisor_command(python, run_dir)} >>{shlex.quote(str(log))} 2>&1"
        body: dict[str, Any] = {
            "entrypoint": entrypoint,
            "submission_id": f"mcp-rl-{run_id}",
            "runtime_env": {"env_vars": {"RAY_JOB_STOP_WAIT_TIME_S": str(math.ceil(grace_s))}},
            "metadata": {"mcp_rl_run_id": run_id},
        }
        if resources.gpus:
            body["entrypoint_num_gpus"] = resources.gpus
        return Submission(
            launcher=self.name,
            command=f"POST {self.address}/api/jobs/ {json.dumps(body)} (runtime_env env_vars: plus mcp-rl's settings)",
            python=python,
            script=json.dumps(body),
        )

    def dry_run(self, submission: Submission, env: dict[str, str]) -> None:
        """Nothing more to ask before submitting: `check` found the dashboard; Ray queues a job
        whose GPUs are not free (it reads pending until they are)."""

    def submit(self, submission: Submission, run_dir: Path, env: dict[str, str]) -> str:
        body = json.loads(submission.script or "{}")
        body["runtime_env"]["env_vars"] = {**job_env(env), **body["runtime_env"]["env_vars"]}
        answer = self._request("POST", "/api/jobs/", body)
        if answer.status_code != 200:
            raise LaunchError(f"Ray refused the job ({answer.status_code}): {answer.text[:500]}")
        return str(answer.json().get("submission_id") or body["submission_id"])

    def info(self, job_id: str) -> JobInfo:
        answer = self._request("GET", f"/api/jobs/{job_id}")
        if answer.status_code == 404:
            return JobInfo(
                launcher=self.name,
                job_id=job_id,
                state=JobState.GONE,
                scheduler_state="gone",
                reason="Ray no longer knows the job",
            )
        if answer.status_code != 200:
            raise LaunchError(f"Ray answered {answer.status_code} for job {job_id}: {answer.text[:300]}")
        data = answer.json()
        raw = str(data.get("status", "UNKNOWN"))
        message = data.get("message") or None
        code = data.get("driver_exit_code")
        if code not in (None, 0) and raw in ("FAILED", "STOPPED"):
            message = f"{message}; exit code {code}" if message else f"exit code {code}"
        return JobInfo(
            launcher=self.name,
            job_id=job_id,
            state=_STATES.get(raw, JobState.UNKNOWN),
            scheduler_state=raw,
            reason=message,
        )

    def request_stop(self, job_id: str) -> None:
        answer = self._request("POST", f"/api/jobs/{job_id}/stop")
        if answer.status_code != 200:
            raise LaunchError(f"Ray could not stop job {job_id} ({answer.status_code}): {answer.text[:300]}")

    def kill(self, job_id: str) -> None:
        # Ray's stop already ends with SIGKILL after the job's grace; asking again is harmless.
        self.request_stop(job_id)
