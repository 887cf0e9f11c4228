"""Fault injection into a run's processes: kill -9 and SIGSTOP of the supervisor, trainer,
environment and API, at start-up, mid-step and during a stop.

The run is supervised by the real supervisor program and ended by the real run service (status,
stop, reconciliation, the detached stopper); the API is the real Atropos `run-api`; trainer and
environment are cheap stand-ins (tests/faults/standin_run.py), so each case takes seconds. A
decoy process the test starts (not its child, no marker) stands in for everything outside the
run. For each case: the reported state is true, nothing of the run is left (no process carries
its marker), the decoy got no signal, metrics and checkpoints written before the fault are still
readable, and every answer is a clear message. Measured times are printed (`-s`) as FAULT-TIME.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest

from mcp_rl import processes
from mcp_rl.runconfig import EnvironmentRef
from mcp_rl.settings import Settings
from mcp_rl.supervisor import service
from mcp_rl.supervisor.models import StopResult
from mcp_rl.supervisor.registry import Registry
from mcp_rl.supervisor.states import PROCESS_NAMES, ProcState, RunState, run_marker
from tests.conftest import REPO, make_env
from tests.kit.runs import run_config, run_record
from tests.kit.stranger import Stranger
from tests.kit.wait import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

# Short deadlines so that every fault is noticed in seconds (the defaults are minutes).
POLICY_ENV = {
    "MCP_RL_HEARTBEAT_TIMEOUT": "2",
    "MCP_RL_API_UNRESPONSIVE_TIMEOUT": "2",
    "MCP_RL_STOP_GRACE": "2",
    "MCP_RL_TRAINER_STOP_GRACE": "3",
}
STOP_BUDGET_S = 20.0


@dataclass
class StandinRun:
    settings: Settings
    registry: Registry
    run_id: str
    run_dir: Path
    supervisor: processes.ProcessIdentity
    marker: str = ""
    answers: list[str] = field(default_factory=list)

    def state(self) -> RunState:
        return self.registry.get_run(self.run_id).state

    def status(self):
        status = service.run_status(self.settings, self.run_id)
        self.answers.append(status.message)
        return status

    def identity(self, name: str) -> tuple[int, float] | None:
        if name == "supervisor":
            return self.supervisor.pid, self.supervisor.create_time
        row = next((p for p in self.registry.processes(self.run_id) if p.name == name), None)
        return (row.pid, row.create_time) if row and row.pid and row.create_time else None

    def metrics_lines(self) -> int:
        path = self.run_dir / "metrics.jsonl"
        return len(path.read_text().splitlines()) if path.exists() else 0

    def checkpoint_lines(self) -> int:
        path = self.run_dir / "checkpoints.jsonl"
        return len(path.read_text().splitlines()) if path.exists() else 0

    def leftovers(self) -> list[int]:
        """Every live process that carries the run's marker: supervisor, its processes, their
        children, a stopper. Nothing else can carry it."""
        found = []
        for proc in psutil.process_iter():
            if proc.pid == os.getpid():
                continue
            try:
                if proc.status() != psutil.STATUS_ZOMBIE and processes.marker_of(proc) == self.marker:
                    found.append(proc.pid)
            except psutil.NoSuchProcess:
                continue
        return found


def start_run(settings: Settings, registry: Registry) -> StandinRun:
    """Record a run as rl_start_training does and launch the real supervisor program on it."""
    run_id = uuid.uuid4().hex[:8]
    run_dir = settings.runs_dir / run_id
    ref = EnvironmentRef(name="standin", class_name="StandIn", file_path=run_dir / "env.py", project_root=run_dir)
    run_config(run_dir, run_id=run_id, environment=ref, base_model="stand-in", num_steps=1000, dump=True)
    registry.create_run(
        run_record(run_id, run_dir, environment="standin"),
        cause="test",
    )
    for name in PROCESS_NAMES:
        registry.set_process(run_id, name, state=ProcState.PENDING)
    marker = run_marker(str(run_dir))
    popen = processes.spawn(
        [sys.executable, "-m", "tests.faults.standin_run", "--run-dir", str(run_dir)],
        run_dir / "logs" / "supervisor.log",
        settings.child_env(PYTHONPATH=str(REPO)),
        cwd=run_dir,
        marker=marker,
    )
    processes.reap_in_background(popen)
    identity = processes.identify(popen.pid)
    assert identity is not None
    registry.update_run(run_id, supervisor_pid=identity.pid, supervisor_create_time=identity.create_time)
    return StandinRun(settings, registry, run_id, run_dir, identity, marker)


@pytest.fixture
def fault_home(home: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Settings, Registry]:
    for name, value in POLICY_ENV.items():
        monkeypatch.setenv(name, value)  # the supervisor and the stopper inherit them
    settings = Settings.from_env(make_env(home, **POLICY_ENV))
    return settings, service.registry_for(settings)


@pytest.fixture
def decoy(tmp_path: Path):
    stranger = Stranger(tmp_path, "decoy")
    yield stranger
    stranger.close()


def _inject(run: StandinRun, target: str, sig: signal.Signals) -> float:
    identity = run.identity(target)
    assert identity is not None, f"{target} has no recorded identity"
    pid, create_time = identity
    # Only ever a process proven to be this run's (the test started it).
    proof = processes.prove(pid, create_time, run.marker)
    assert proof.alive and proof.process is not None, proof.reason
    proof.process.send_signal(sig)
    return time.monotonic()


def _reach(run: StandinRun, phase: str, target: str = "trainer") -> None:
    if phase == "startup":
        spawned = "trainer" if target == "supervisor" else target
        wait_for(lambda: run.identity(spawned), 60, f"the {spawned} to be spawned")
        assert run.state() == RunState.STARTING
    else:
        wait_for(lambda: run.state() == RunState.RUNNING and run.metrics_lines() >= 2, 90, "two steps of a running run")


def _record(case: str, **times: float) -> None:
    print(f"FAULT-TIME {case}: " + ", ".join(f"{k} {v:.2f} s" for k, v in times.items()), flush=True)


def _stop(run: StandinRun) -> tuple[StopResult, float]:
    started = time.monotonic()
    result = service.stop_run(run.settings, run.run_id, budget_s=STOP_BUDGET_S)
    run.answers.append(result.message)
    return result, time.monotonic() - started


def _nothing_left(run: StandinRun, since: float, timeout: float = 40) -> float:
    wait_for(lambda: not run.leftovers(), timeout, f"nothing of run {run.run_id} left (left: {run.leftovers()})")
    return time.monotonic() - since


def _check_data_and_answers(run: StandinRun, metrics_before: int, checkpoints_before: int) -> None:
    rows = service.read_metrics(run.settings, run.run_id, tail=10_000)["rows"]
    assert len(rows) >= metrics_before and [r["step"] for r in rows[:metrics_before]] == list(
        range(1, metrics_before + 1)
    )
    assert run.checkpoint_lines() >= checkpoints_before
    assert all(answer and len(answer) < 4000 and "Traceback" not in answer for answer in run.answers), run.answers


# --- a process dies or hangs: the run fails with the cause, and nothing is left ----------------
FAILS = [
    ("trainer", signal.SIGKILL, "startup", "trainer (pid"),
    ("api", signal.SIGKILL, "startup", "api (pid"),
    ("supervisor", signal.SIGKILL, "startup", "supervisor (pid"),
    ("env", signal.SIGKILL, "startup", "env (pid"),
    ("trainer", signal.SIGKILL, "mid-step", "trainer (pid"),
    ("env", signal.SIGKILL, "mid-step", "env (pid"),
    ("api", signal.SIGKILL, "mid-step", "api (pid"),
    ("supervisor", signal.SIGKILL, "mid-step", "supervisor (pid"),
    ("trainer", signal.SIGSTOP, "mid-step", "hung: no heartbeat"),
    ("api", signal.SIGSTOP, "mid-step", "api (pid"),
]


@pytest.mark.parametrize(("target", "sig", "phase", "cause"), FAILS, ids=[f"{t}-{s.name}-{p}" for t, s, p, _ in FAILS])
def test_a_process_that_dies_or_hangs_fails_the_run_and_leaves_nothing(
    fault_home: tuple[Settings, Registry], decoy: Stranger, target: str, sig: signal.Signals, phase: str, cause: str
) -> None:
    run = start_run(*fault_home)
    try:
        _reach(run, phase, target)
        metrics_before, checkpoints_before = run.metrics_lines(), run.checkpoint_lines()
        fault_at = _inject(run, target, sig)
        # Status calls are what notice a dead supervisor (and hand its leftovers to a stopper).
        status = wait_for(
            lambda: (s := run.status()).status == RunState.FAILED and s, 30, "the run to fail", interval=0.2
        )
        failed_after = time.monotonic() - fault_at
        assert cause in status.error, status.error
        left_after = _nothing_left(run, fault_at)
        final = run.status()
        assert final.status == RunState.FAILED and "still being ended" not in final.message
        assert not any(p.alive for p in final.processes.values())
        _check_data_and_answers(run, metrics_before, checkpoints_before)
        assert decoy.untouched(), decoy.signals()
        _record(f"{target} {sig.name} {phase}", fault_to_failed=failed_after, fault_to_nothing_left=left_after)
    finally:
        _cleanup(run)


# --- a frozen process that the supervisor does not watch: still running, and stop ends it -----
RUNNING = [
    ("supervisor", signal.SIGSTOP, "startup"),
    ("supervisor", signal.SIGSTOP, "mid-step"),
    ("env", signal.SIGSTOP, "mid-step"),
    ("trainer", signal.SIGSTOP, "startup"),
]


@pytest.mark.parametrize(("target", "sig", "phase"), RUNNING, ids=[f"{t}-{s.name}-{p}" for t, s, p in RUNNING])
def test_a_frozen_process_leaves_the_run_as_it_was_and_stop_ends_everything(
    fault_home: tuple[Settings, Registry], decoy: Stranger, target: str, sig: signal.Signals, phase: str
) -> None:
    run = start_run(*fault_home)
    try:
        _reach(run, phase, target)
        metrics_before, checkpoints_before = run.metrics_lines(), run.checkpoint_lines()
        before = run.state()
        _inject(run, target, sig)
        # Frozen, not dead: the run is reported as it is (nothing proves it ended).
        assert not processes.wait_until(lambda: run.status().status != before, time.monotonic() + 3)
        result, took = _stop(run)
        assert took < STOP_BUDGET_S
        assert result.status == RunState.STOPPED and not result.in_progress and result.processes_left == [], result
        left_after = took + _nothing_left(run, time.monotonic())
        _check_data_and_answers(run, metrics_before, checkpoints_before)
        assert decoy.untouched(), decoy.signals()
        _record(f"{target} {sig.name} {phase} then stop", stop_answer=took, stop_to_nothing_left=left_after)
    finally:
        _cleanup(run)


# --- a fault while the run is being stopped -------------------------------------------------
DURING_STOP = [
    ("supervisor", signal.SIGKILL),
    ("supervisor", signal.SIGSTOP),
    ("trainer", signal.SIGKILL),
    ("trainer", signal.SIGSTOP),
    ("api", signal.SIGKILL),
    ("api", signal.SIGSTOP),
]


@pytest.mark.parametrize(("target", "sig"), DURING_STOP, ids=[f"{t}-{s.name}" for t, s in DURING_STOP])
def test_a_fault_during_a_stop_still_ends_stopped_with_nothing_left(
    fault_home: tuple[Settings, Registry], decoy: Stranger, target: str, sig: signal.Signals
) -> None:
    run = start_run(*fault_home)
    try:
        _reach(run, "mid-step")
        metrics_before, checkpoints_before = run.metrics_lines(), run.checkpoint_lines()
        outcome: list[tuple[StopResult, float]] = []
        stopper = threading.Thread(target=lambda: outcome.append(_stop(run)))
        stopper.start()
        # The trainer finishes its step for a second after SIGTERM: the stop is under way.
        wait_for(lambda: run.state() == RunState.STOPPING, 10, "the stop to begin")
        wait_for(
            lambda: (
                "env" in {e.subject for e in run.registry.events(run.run_id) if e.state == "stopped"}
                or target != "trainer"
            ),
            10,
            "the supervisor to reach the trainer",
        )
        _inject(run, target, sig)
        stopper.join(STOP_BUDGET_S + 10)
        assert outcome, "stop_run did not answer"
        result, took = outcome[0]
        assert took < STOP_BUDGET_S
        if result.in_progress:  # honest about it: finished by the detached stopper
            assert "continues in the background" in result.message
            wait_for(lambda: run.state() == RunState.STOPPED, 60, "the background stop")
        assert run.state() == RunState.STOPPED
        left_after = took + _nothing_left(run, time.monotonic())
        _check_data_and_answers(run, metrics_before, checkpoints_before)
        assert decoy.untouched(), decoy.signals()
        _record(
            f"{target} {sig.name} during stop",
            stop_answer=took,
            stop_to_nothing_left=left_after,
            in_background=float(result.in_progress),
        )
    finally:
        _cleanup(run)


def _cleanup(run: StandinRun) -> None:
    """After a failed assertion: end whatever of the run is left (only processes carrying its marker)."""
    left = run.leftovers()
    if left:
        log = run.run_dir / "logs" / "supervisor.log"
        print(f"--- left {left}; supervisor.log of {run.run_id}:\n" + "\n".join(log.read_text().splitlines()[-20:]))
    for pid in left:
        try:
            proc = psutil.Process(pid)
            if processes.marker_of(proc) == run.marker:
                proc.send_signal(signal.SIGCONT)
                proc.kill()
        except psutil.NoSuchProcess:
            pass
