"""How many CPU cores this process may really use, for the torch thread default.

`os.cpu_count()` counts the host's cores. In a container limited to 2 CPUs by a CFS quota, or
pinned to some cores, that is more than the process gets, and "half the cores" then gives torch
more threads than cores. Extra torch threads are not free on a small machine: measured with
bench/bench_throughput.py on a 2-core AMD EPYC with other work beside it (2026-11-25), 2 threads
instead of 1 made the plain loop 1.6x faster but mcp-rl's pipeline (sampler, HTTP, LoRA training,
each a chain of small operators that wait on every thread) 1.5x slower.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

CGROUP = Path("/sys/fs/cgroup")


def _quota_cpus(root: Path = CGROUP) -> float | None:
    """The CFS quota in cores (cgroup v2 `cpu.max`, or v1 `cpu.cfs_quota_us`), None if unlimited
    or unknown."""
    try:
        parts = (root / "cpu.max").read_text().split()
        if len(parts) == 2 and parts[0] != "max":
            return int(parts[0]) / int(parts[1])
        return None
    except (OSError, ValueError, ZeroDivisionError):
        pass
    try:
        quota = int((root / "cpu" / "cpu.cfs_quota_us").read_text())
        period = int((root / "cpu" / "cpu.cfs_period_us").read_text())
        return quota / period if quota > 0 and period > 0 else None
    except (OSError, ValueError):
        return None


def usable_cpus(root: Path = CGROUP) -> int:
    """The cores this process may run on (its affinity), capped by a CFS quota; at least 1."""
    try:
        count = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        count = os.cpu_count() or 1
    quota = _quota_cpus(root)
    if quota is not None:
        count = min(count, max(1, math.ceil(quota)))
    return max(1, count)
