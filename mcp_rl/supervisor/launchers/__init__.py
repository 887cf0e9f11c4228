"""Where a run's supervisor runs: here (`local`), or as one job of a cluster scheduler (`slurm`, `ray`).

A cluster job runs the unchanged supervisor (`python -m mcp_rl.supervisor --run-dir DIR`), so the
run's three processes stay together on one node and talk over its loopback. The run folder and
state.db are on a filesystem both sides see; the supervisor records the run there as it does
locally. What the MCP server cannot see from here (a process on another node) it takes from the
scheduler: the job's state and reason. Each scheduler is one small module behind `ClusterLauncher`
(base.py).
"""

from __future__ import annotations

import threading
import time

from mcp_rl.supervisor.launchers.base import (
    JOB_INFO_TTL_S,
    JOB_STOP_MARGIN_S,
    LAUNCHERS,
    SUBMISSION_FILE,
    ClusterLauncher,
    JobInfo,
    JobState,
    LauncherName,
    Resources,
    Submission,
    supervisor_command,
    supervisor_python,
)
from mcp_rl.supervisor.launchers.ray import RayLauncher
from mcp_rl.supervisor.launchers.slurm import SlurmLauncher

__all__ = [
    "JOB_STOP_MARGIN_S",
    "LAUNCHERS",
    "SUBMISSION_FILE",
    "ClusterLauncher",
    "JobInfo",
    "JobState",
    "LauncherName",
    "Resources",
    "Submission",
    "job_info",
    "launcher_for",
    "supervisor_command",
    "supervisor_python",
]


def launcher_for(name: str, address: str | None = None) -> ClusterLauncher:
    """The cluster launcher called `name` (slurm or ray)."""
    if name == "slurm":
        return SlurmLauncher()
    if name == "ray":
        return RayLauncher(address)
    raise ValueError(f"no cluster launcher {name!r}")


_cache: dict[tuple[str, str], tuple[float, JobInfo]] = {}
_cache_lock = threading.Lock()


def job_info(launcher: str, job_id: str, address: str | None = None, fresh: bool = False) -> JobInfo:
    """The job's state, reused for JOB_INFO_TTL_S; a scheduler that cannot be asked reads UNKNOWN
    with its words as the reason (never an exception: status calls must answer)."""
    key = (launcher, job_id)
    now = time.monotonic()
    with _cache_lock:
        hit = _cache.get(key)
    if hit is not None and not fresh and now - hit[0] < JOB_INFO_TTL_S and not hit[1].ended:
        return hit[1]
    if hit is not None and hit[1].ended and not fresh:
        return hit[1]  # an ended job stays ended
    try:
        info = launcher_for(launcher, address).info(job_id)
    except Exception as exc:
        info = JobInfo(
            launcher=launcher,
            job_id=job_id,
            state=JobState.UNKNOWN,
            scheduler_state="unknown",
            reason=f"could not ask {launcher}: {str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__}",
        )
    with _cache_lock:
        _cache[key] = (now, info)
    return info
