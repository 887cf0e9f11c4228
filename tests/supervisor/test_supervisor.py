"""The supervisor's state machine against real processes: a real Atropos `run-api` and small
Python children standing in for the trainer and environment (tests/supervisor/child.py)."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

import psutil

from mcp_rl.ports import allocate_ports, port_is_free
from mcp_rl.supervisor import readiness
from mcp_rl.supervisor.registry import Registry
from mcp_rl.supervisor.states import ProcState, RunState
from mcp_rl.supervisor.supervisor import Policy, ProcessSpec, RunSupervisor
from tests.kit.runs import run_record
from tests.kit.wait import wait_for

CHILD = str(Path(__file__).with_name("child.py"))


class Harness:
    def __init__(self, tmp_path: Path, policy: Policy | None = None, **trainer_flags: object) -> None:
        self.dir = tmp_path
        self.registry = Registry(tmp_path / "state.db")
        self.status = tmp_path / "trainer_status.json"
        self.done = tmp_path / "trainer.done"
        self.env_touched = tmp_path / "env.touched"
        self.api_port, self.inference_port = allocate_ports(2)
        self.registry.create_run(
            run_record("r1", tmp_path, environment="t", api_port=self.api_port, inference_port=self.inference_port)
        )
        env = dict(os.environ)
        trainer_argv = [
            sys.executable,
            CHILD,
            "--port",
            str(self.inference_port),
            "--status",
            str(self.status),
            "--done-when",
            str(self.done),
        ]
        for flag, value in trainer_flags.items():
            trainer_argv.append("--" + flag.replace("_", "-"))
            if value is not True:
                trainer_argv.append(str(value))
        self.specs = [
            ProcessSpec(
                "api",
                [sys.executable, "-m", "atroposlib.cli.run_api", "--host", "127.0.0.1", "--port", str(self.api_port)],
                tmp_path / "logs/api.log",
                env,
                readiness.api_up(self.api_port),
                60,
                "GET /status",
                port=self.api_port,
            ),
            ProcessSpec(
                "trainer",
                trainer_argv,
                tmp_path / "logs/trainer.log",
                env,
                readiness.trainer_serving(self.inference_port),
                30,
                "GET /health",
                port=self.inference_port,
            ),
            ProcessSpec(
                "env",
                [sys.executable, CHILD, "--touch", str(self.env_touched)],
                tmp_path / "logs/env.log",
                env,
                self.env_touched.exists,
                30,
                "touched its file",
            ),
        ]
        self.supervisor = RunSupervisor(
            "r1",
            self.registry,
            self.specs,
            self.status,
            policy or Policy(stop_grace_s=3, trainer_stop_grace_s=3, poll_s=0.1, api_probe_period_s=0.5),
        )
        self.final: RunState | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        self.final = self.supervisor.run()

    def start(self) -> Harness:
        self.thread.start()
        return self

    def state(self) -> RunState:
        return self.registry.get_run("r1").state

    def wait_state(self, state: RunState, timeout: float = 60) -> None:
        wait_for(lambda: self.state() == state, timeout, f"run state {state} (now {self.state()})")

    def pid(self, name: str) -> int:
        return next(p.pid for p in self.registry.processes("r1") if p.name == name)

    def join(self) -> RunState:
        self.thread.join(timeout=60)
        assert not self.thread.is_alive()
        return self.final

    def assert_nothing_left(self) -> None:
        for proc in self.registry.processes("r1"):
            if proc.pid:
                assert not psutil.pid_exists(proc.pid) or psutil.Process(proc.pid).status() == psutil.STATUS_ZOMBIE, (
                    proc
                )
        assert port_is_free(self.api_port) and port_is_free(self.inference_port)


def test_environment_exit_0_is_normal_and_the_trainer_finishing_completes_the_run(tmp_path: Path) -> None:
    h = Harness(tmp_path).start()
    h.wait_state(RunState.RUNNING)
    procs = {p.name: p for p in h.registry.processes("r1")}
    assert procs["api"].ready_at <= procs["trainer"].started_at  # strictly in order
    assert procs["trainer"].ready_at <= procs["env"].started_at
    wait_for(lambda: {p.name: p.state for p in h.registry.processes("r1")}["env"] == ProcState.EXITED, 20, "env exit")
    assert h.state() == RunState.RUNNING  # the env ending alone does not end the run
    h.done.write_text("x")
    assert h.join() == RunState.COMPLETED
    run = h.registry.get_run("r1")
    assert "finished step 2 of 2" in run.cause
    assert [e.state for e in h.registry.events("r1") if e.subject == "run"] == ["starting", "running", "completed"]
    h.assert_nothing_left()


def hold_environment(h: Harness) -> None:
    """Prestart the environment stand-in, held (as `runner --start-when`) until released."""
    go = h.dir / "go"
    h.specs[2].argv += ["--wait-for", str(go)]
    h.specs[2].prestart = True
    h.specs[2].release = go.touch


def test_a_prestarted_environment_is_released_only_once_the_trainer_is_ready(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    hold_environment(h)
    h.start()
    h.wait_state(RunState.RUNNING)
    procs = {p.name: p for p in h.registry.processes("r1")}
    assert procs["env"].started_at < procs["trainer"].ready_at  # imports overlapped the trainer's start
    served_at = float(h.env_touched.read_text())
    assert served_at >= procs["trainer"].ready_at  # but it began its work only after
    events = [(e.subject, e.state) for e in h.registry.events("r1")]
    assert events.index(("trainer", "running")) < events.index(("env", "released")) < events.index(("env", "running"))
    h.done.write_text("x")
    assert h.join() == RunState.COMPLETED
    h.assert_nothing_left()


def test_prestarted_processes_start_with_the_api_and_the_run_still_runs_in_order(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    h.specs[1].prestart = True
    hold_environment(h)
    h.start()
    h.wait_state(RunState.RUNNING)
    procs = {p.name: p for p in h.registry.processes("r1")}
    # Both started before the API answered (their start-up overlapped it) ...
    assert procs["trainer"].started_at < procs["api"].ready_at and procs["env"].started_at < procs["api"].ready_at
    # ... and readiness was still taken in order, the environment held until the trainer was ready.
    assert procs["api"].ready_at <= procs["trainer"].ready_at <= procs["env"].ready_at
    assert float(h.env_touched.read_text()) >= procs["trainer"].ready_at
    h.done.write_text("x")
    assert h.join() == RunState.COMPLETED
    h.assert_nothing_left()


def test_a_prestarted_environment_that_crashes_fails_the_run_at_once(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    h.specs[2].argv = [sys.executable, "-c", "raise SystemExit('cannot import the environment')"]
    h.specs[2].prestart = True
    h.specs[1].ready = lambda: False  # the trainer is still loading
    started = time.monotonic()
    h.start()
    assert h.join() == RunState.FAILED
    assert time.monotonic() - started < 20
    cause = h.registry.get_run("r1").cause
    assert "env" in cause and "exit code 1" in cause and "cannot import the environment" in cause
    h.assert_nothing_left()


def test_killed_trainer_fails_the_run_with_the_cause_and_stops_the_rest(tmp_path: Path) -> None:
    h = Harness(tmp_path).start()
    h.wait_state(RunState.RUNNING)
    os.kill(h.pid("trainer"), signal.SIGKILL)
    killed = time.monotonic()
    h.wait_state(RunState.FAILED, timeout=10)
    assert time.monotonic() - killed < 5
    cause = h.registry.get_run("r1").cause
    assert "trainer" in cause and "SIGKILL" in cause and "Last" in cause and "serving on" in cause
    assert h.join() == RunState.FAILED
    h.assert_nothing_left()


def test_trainer_exiting_0_without_finishing_is_a_failure(tmp_path: Path) -> None:
    h = Harness(tmp_path, phase_at_exit="training").start()
    h.wait_state(RunState.RUNNING)
    h.done.write_text("x")
    assert h.join() == RunState.FAILED
    assert "exited 0 without finishing" in h.registry.get_run("r1").cause
    h.assert_nothing_left()


def test_a_trainer_that_stopped_itself_at_its_cost_cap_ends_the_run_as_stopped_with_its_cause(tmp_path: Path) -> None:
    cause = "cost cap reached at $4.80 (estimated; max_cost_usd $5)"
    h = Harness(tmp_path, phase_at_exit="stopped", stop_cause=cause).start()
    h.wait_state(RunState.RUNNING)
    h.done.write_text("x")
    assert h.join() == RunState.STOPPED
    run = h.registry.get_run("r1")
    assert run.cause.startswith(cause) and "stopped after step 2 of 2" in run.cause
    h.assert_nothing_left()


def test_trainer_error_exit_is_reported_with_its_code(tmp_path: Path) -> None:
    h = Harness(tmp_path, exit_code=3, phase_at_exit="failed").start()
    h.wait_state(RunState.RUNNING)
    h.done.write_text("x")
    assert h.join() == RunState.FAILED
    cause = h.registry.get_run("r1").cause
    assert "trainer" in cause and "exit code 3" in cause and "Trainer error: step 2 raised: boom" in cause


def test_a_trainer_that_starved_waiting_for_batches_points_at_the_environment(tmp_path: Path) -> None:
    h = Harness(tmp_path, exit_code=1, phase_at_exit="waiting_for_batch").start()
    h.wait_state(RunState.RUNNING)
    h.done.write_text("x")
    assert h.join() == RunState.FAILED
    assert "waiting for a batch: check the environment's log" in h.registry.get_run("r1").cause


def test_silent_trainer_fails_past_the_heartbeat_deadline(tmp_path: Path) -> None:
    policy = Policy(stop_grace_s=2, trainer_stop_grace_s=2, poll_s=0.1, heartbeat_timeout_s=1.5, api_probe_period_s=0.5)
    h = Harness(tmp_path, policy=policy, no_heartbeat=True).start()
    assert h.join() == RunState.FAILED
    assert "hung" in h.registry.get_run("r1").cause
    h.assert_nothing_left()


def test_heartbeat_going_stale_while_starting_fails_before_the_ready_deadline(tmp_path: Path) -> None:
    policy = Policy(stop_grace_s=2, trainer_stop_grace_s=2, poll_s=0.1, heartbeat_timeout_s=1.0, api_probe_period_s=0.5)
    h = Harness(tmp_path, policy=policy, heartbeats=1)
    h.specs[1].ready = lambda: False  # loading forever
    started = time.monotonic()
    h.start()
    assert h.join() == RunState.FAILED
    assert time.monotonic() - started < 20  # the trainer's ready deadline is 30 s
    assert "hung" in h.registry.get_run("r1").cause
    h.assert_nothing_left()


def test_environment_exiting_0_without_registering_fails_at_once(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    h.specs[2].ready = lambda: False
    started = time.monotonic()
    h.start()
    assert h.join() == RunState.FAILED
    assert time.monotonic() - started < 20  # the env's ready deadline is 30 s
    assert "env exited 0 before it was ready" in h.registry.get_run("r1").cause
    h.assert_nothing_left()


def test_readiness_deadline_fails_with_the_probe_named(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    h.specs[1].ready = lambda: False  # never ready
    h.specs[1].ready_deadline_s = 1.0
    h.start()
    assert h.join() == RunState.FAILED
    cause = h.registry.get_run("r1").cause
    assert "trainer did not become ready within 1 s (GET /health)" in cause
    h.assert_nothing_left()


def test_crash_during_start_fails_at_once(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    h.specs[0].argv = [sys.executable, "-m", "atroposlib.cli.run_api", "--port", "not-a-port"]
    started = time.monotonic()
    h.start()
    assert h.join() == RunState.FAILED
    assert time.monotonic() - started < 30
    cause = h.registry.get_run("r1").cause
    assert "api" in cause and "exit code 2" in cause and "invalid int value" in cause


def test_stop_request_ends_everything_in_reverse_order(tmp_path: Path) -> None:
    h = Harness(tmp_path, spawn_grandchild=True).start()
    h.wait_state(RunState.RUNNING)
    # The env stand-in exits 0 right after it is ready; wait until the supervisor has recorded
    # that, so the stop below meets a known set of live processes on any machine (on a slow one
    # the stop could otherwise come first and the env be stopped too).
    wait_for(lambda: _proc_state(h, "env") == ProcState.EXITED, 30, "the env's own exit recorded")
    assert h.registry.transition("r1", RunState.STOPPING, "stop requested")
    assert h.join() == RunState.STOPPED
    stopped = [e.subject for e in h.registry.events("r1") if e.state == "stopped" and e.subject != "run"]
    assert stopped == ["trainer", "api"]  # reverse start order; the env had exited on its own
    h.assert_nothing_left()
    assert not any(
        "while True" in " ".join(p.cmdline())
        for p in psutil.process_iter()
        if _safe_ppid(p) == 1 and _in_dir(p, tmp_path)
    )


def _proc_state(h: Harness, name: str) -> ProcState:
    return next(ProcState(p.state) for p in h.registry.processes("r1") if p.name == name)


def _safe_ppid(p: psutil.Process) -> int:
    try:
        return p.ppid()
    except psutil.Error:
        return -1


def _in_dir(p: psutil.Process, path: Path) -> bool:
    try:
        return p.cwd().startswith(str(path))
    except psutil.Error:
        return False
