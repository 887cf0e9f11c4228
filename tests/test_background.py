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


def test_every_job_kind_takes_its_id_from_the_one_format() -> None:
    ids = {background.new_job_id() for _ in range(50)}
    assert len(ids) == 50 and all(background.JOB_ID_RE.match(i) for i in ids)
    from mcp_rl.evaluation.checkpoint_models import EVAL_ID_RE
    from mcp_rl.inference_test.models import TEST_ID_RE

    assert EVAL_ID_RE is TEST_ID_RE is background.JOB_ID_RE
    for bad in ("../x", "", "-x", "a/b", "a" * 65, "é"):
        assert not background.JOB_ID_RE.match(bad), bad
    # the three starters call the one generator (no job kind formats its own id)
    package = Path(background.__file__).parent
    for starter in ("evaluation/checkpoint_eval.py", "inference_test/service.py", "weights/jobs.py"):
        source = (package / starter).read_text(encoding="utf-8")
        assert "new_job_id()" in source and "token_hex" not in source, starter


WORKER = """
import os, sys, threading
from mcp_rl import background

class Job:
    def __init__(self, folder, settings):
        self.folder, self.stop = folder, threading.Event()

    def run(self):
        (self.folder / "running").write_text("")
        return "stopped" if self.stop.wait(60) else "timed out"

code = background.worker_main(sys.argv[1:], module="job", description="a job", make=Job, succeeded=("stopped",))
try:
    os.fstat(int(sys.argv[-1]))
    print("still open", file=sys.stderr)
except OSError:
    print("closed", file=sys.stderr)
sys.exit(code)
"""


def test_the_one_worker_entry_point_stops_at_sigterm_and_closes_the_descriptors_it_was_handed(
    tmp_path: Path,
) -> None:
    import signal
    import subprocess

    from tests.kit.wait import wait_for

    read_end, held = os.pipe()  # a descriptor handed to the worker, as a lease is
    proc = subprocess.Popen(
        [sys.executable, "-c", WORKER, "--dir", str(tmp_path), "--held-fd", str(held)],
        pass_fds=(held,),
        stderr=subprocess.PIPE,
    )
    os.close(held)
    try:
        wait_for(lambda: (tmp_path / "running").exists() or proc.poll() is not None, 30, "the job to start")
        assert proc.poll() is None
        proc.send_signal(signal.SIGTERM)  # the cue to stop cleanly: the job ends "stopped", exit 0
        assert proc.wait(timeout=30) == 0
        assert proc.stderr is not None
        log = proc.stderr.read().decode()
        assert f"job {tmp_path.name}: stopped" in log
        assert log.rstrip().endswith("closed"), log  # closed by the entry point once the job ended
    finally:
        proc.kill()
        os.close(read_end)
