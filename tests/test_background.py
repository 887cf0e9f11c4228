"""The background jobs' one worker module (mcp_rl.background): a worker spawned and recorded,
told alive or dead, cancelled only when proven ours, and one wait loop for every job kind.
Fast tier: real child processes, no model."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import anyio

from mcp_rl import background, processes

SLEEPER = [sys.executable, "-c", "import time; time.sleep(300)"]


def _start(folder: Path, marker: str) -> background.WorkerRecord:
    folder.mkdir(parents=True, exist_ok=True)
    env = {"PATH": os.environ.get("PATH", "")}
    return background.start_worker(SLEEPER, folder, folder / "worker.log", env, marker=marker)


def test_a_worker_is_cancelled_only_with_its_own_marker_and_then_reads_dead(tmp_path: Path) -> None:
    folder = tmp_path / "job"
    record = _start(folder, processes.marker_for("test", folder))
    assert background.read_worker(folder) == record and background.worker_alive(folder)
    # Another job's marker proves nothing: the worker is left running.
    background.cancel_worker(folder, processes.marker_for("test", tmp_path / "other"), 2.0)
    assert background.worker_alive(folder) and not background.cancelled(folder)
    assert background.cancel_worker(folder, processes.marker_for("test", folder), 2.0) is True
    assert background.cancelled(folder)  # recorded, for a job kind whose status has no cancelled state
    assert processes.wait_until(lambda: not background.worker_alive(folder), time.monotonic() + 10)
    # Nothing left to stop: a second cancel says so, and so does a job without a worker record.
    assert background.cancel_worker(folder, processes.marker_for("test", folder), 2.0) is False
    assert background.cancel_worker(tmp_path / "none", processes.marker_for("test", tmp_path / "none"), 2.0) is False


def test_the_wait_loop_returns_when_the_job_ends_or_at_its_deadline() -> None:
    reads: list[int] = []
    seen: list[int] = []

    def read() -> int:
        reads.append(len(reads))
        return reads[-1]

    async def on_read(value: int) -> None:
        seen.append(value)

    ended = anyio.run(background.wait_for_job, read, lambda n: n < 3, 30.0, on_read, 0.01)
    assert ended == 3 and seen == [0, 1, 2, 3]
    # A job that never ends is handed back as it is at the deadline, not waited on for ever.
    started = time.monotonic()
    still = anyio.run(background.wait_for_job, lambda: "running", lambda s: True, 0.3, None, 0.05)
    assert still == "running" and 0.3 <= time.monotonic() - started < 5
