"""`mcp-rl demo` end to end: a real stdio MCP client, the real server, a real local training run.

The demo runs as a person runs it (a subprocess in its own session, like a terminal's foreground
group) in a clean state directory. Ctrl-C is a SIGINT to that group.
"""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from mcp_rl.demo import demo_processes
from mcp_rl.settings import Settings
from mcp_rl.supervisor import service
from tests.conftest import REPO, make_env
from tests.kit.wait import wait_for

pytestmark = pytest.mark.slow

DEMO_DEADLINE_S = 1500.0
STEPS = 3


class DemoProcess:
    """The demo as a subprocess; its output lines are collected as they come."""

    def __init__(self, home: Path, steps: int) -> None:
        env = make_env(home.parent / "user-home")  # the user's state dir; the demo gets its own
        env["PATH"] = os.environ.get("PATH", "")
        self.home = home
        self.lines: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "mcp_rl", "demo", "--home", str(home), "--steps", str(steps)],
            env=env,
            cwd=REPO,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._queue.put(line.rstrip("\n"))
        self._queue.put(None)

    def wait_for_line(self, pattern: str, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self._queue.get(timeout=max(0.0, min(1.0, deadline - time.monotonic())))
            except queue.Empty:
                line = ""
            if line is None:
                raise AssertionError(f"demo exited before {pattern!r}:\n" + "\n".join(self.lines))
            if line:
                self.lines.append(line)
                if re.search(pattern, line):
                    return line
            if time.monotonic() > deadline:
                raise AssertionError(f"no {pattern!r} after {timeout} s:\n" + "\n".join(self.lines))

    def finish(self, timeout: float) -> int:
        code = self.proc.wait(timeout=timeout)
        while True:
            line = self._queue.get(timeout=10)
            if line is None:
                return code
            self.lines.append(line)

    @property
    def output(self) -> str:
        return "\n".join(self.lines)

    def kill_leftovers(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


def assert_nothing_left(home: Path, demo_pid: int) -> None:
    left = demo_processes(home)
    assert left == [], [(p.pid, p.info.get("cmdline")) for p in left]
    assert not Path(f"/proc/{demo_pid}").exists() or open(f"/proc/{demo_pid}/stat").read().split()[2] == "Z"


def test_demo_finishes_with_a_reward_curve_and_leaves_nothing(tmp_path: Path) -> None:
    home = tmp_path / "demo"
    demo = DemoProcess(home, STEPS)
    try:
        started = time.monotonic()
        code = demo.finish(DEMO_DEADLINE_S)
        elapsed = time.monotonic() - started
    finally:
        demo.kill_leftovers()
    out = demo.output
    assert code == 0, out
    print(f"demo took {elapsed:.0f} s\n{out}")
    for expected in (
        "rl_list_environments",
        "rl_select_environment('arithmetic')",
        "rl_test_inference",
        "rl_start_training: run",
        "rl_get_results",
        "Nothing of the demo is left running",
    ):
        assert expected in out, out
    # Watched once a second: a step that starts and ends between two polls has no line of its own
    # (CI saw step 1 pass so), but the watched steps rise to the last and the results list each.
    steps = [int(s) for s, _, _ in re.findall(r"step +(\d+)/(\d+) \[[#.]+\] +reward (-?[\d.]+)", out)]
    assert steps and steps == sorted(set(steps)) and steps[-1] == STEPS, out
    listed = [int(s) for s in re.findall(r"^ +step +(\d+) +reward -?[\d.]+ +loss", out, flags=re.M)]
    assert listed == list(range(1, STEPS + 1)), out

    png = Path(re.search(r"Reward curve: (\S+\.png)", out).group(1))
    assert png.is_file() and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.parent == home

    settings = Settings.from_env(make_env(home))
    runs = service.list_runs(settings).runs
    assert len(runs) == 1 and runs[0].status == "completed" and runs[0].step == STEPS
    metrics = Path(service.run_status(settings, runs[0].run_id).config_path).parent / "metrics.jsonl"
    assert len(metrics.read_text().splitlines()) == STEPS + 1  # step 0: the base model's held-out evaluation
    assert_nothing_left(home, demo.proc.pid)


def test_ctrl_c_during_training_stops_the_run_and_leaves_nothing(tmp_path: Path) -> None:
    home = tmp_path / "demo"
    demo = DemoProcess(home, 50)
    try:
        demo.wait_for_line(r"rl_start_training: run", DEMO_DEADLINE_S)
        # Wait for a trainer phase, so the run's three processes are up or coming up.
        demo.wait_for_line(r"trainer |step +1/", 600)
        os.killpg(demo.proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal does
        code = demo.finish(300)
    finally:
        demo.kill_leftovers()
    out = demo.output
    assert code == 130, out
    assert "Stopping run" in out and "Nothing of the demo is left running" in out, out
    settings = Settings.from_env(make_env(home))
    runs = service.list_runs(settings).runs
    assert len(runs) == 1 and runs[0].status == "stopped", out
    assert_nothing_left(home, demo.proc.pid)


def test_ctrl_c_during_the_smoke_test_ends_its_worker(tmp_path: Path) -> None:
    home = tmp_path / "demo"
    demo = DemoProcess(home, STEPS)
    try:
        demo.wait_for_line(r"rl_test_inference\(", 600)
        # The tool call is under way once the test's detached worker has recorded itself.
        try:
            wait_for(lambda: list(home.glob("tests/*/worker.json")), 120, "the inference-test worker", interval=0.2)
        except AssertionError as exc:
            raise AssertionError("no inference-test worker started:\n" + demo.output) from exc
        os.killpg(demo.proc.pid, signal.SIGINT)
        code = demo.finish(300)
    finally:
        demo.kill_leftovers()
    out = demo.output
    assert code == 130, out
    assert "Nothing of the demo is left running" in out and "rl_start_training" not in out, out
    assert_nothing_left(home, demo.proc.pid)
