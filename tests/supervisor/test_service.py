"""The run service against a real registry, real run directories and real (small) processes."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from statistics import median

import pytest

from mcp_rl import processes
from mcp_rl.errors import NotFound
from mcp_rl.settings import Settings
from mcp_rl.supervisor import service
from mcp_rl.supervisor.registry import Registry
from mcp_rl.supervisor.states import ProcState, RunState, run_marker
from mcp_rl.supervisor.supervisor import Policy
from tests.kit.footprint import state_footprint
from tests.kit.runs import run_record
from tests.kit.stranger import Stranger
from tests.kit.wait import wait_for

SLEEPER = [sys.executable, "-c", "import time\nwhile True: time.sleep(1)"]


@pytest.fixture
def registry(settings: Settings) -> Registry:
    return service.registry_for(settings)


def _add_run(
    settings: Settings,
    registry: Registry,
    run_id: str,
    state: RunState = RunState.STARTING,
    created_at: float | None = None,
    supervisor: processes.ProcessIdentity | None = None,
) -> Path:
    run_dir = settings.runs_dir / run_id
    (run_dir / "logs").mkdir(parents=True)
    (run_dir / "run.yaml").write_text(f"run_id: {run_id}\n")
    registry.create_run(
        run_record(
            run_id,
            run_dir,
            created_at=created_at,
            supervisor_pid=supervisor.pid if supervisor else None,
            supervisor_create_time=supervisor.create_time if supervisor else None,
        )
    )
    if state in (RunState.RUNNING, RunState.COMPLETED):
        registry.transition(run_id, RunState.RUNNING, "ready")
    if state != RunState.RUNNING and state != RunState.STARTING:
        registry.transition(run_id, state, f"test {state}")
    return run_dir


def _marker(settings: Settings, run_id: str) -> str:
    return run_marker(str(settings.runs_dir / run_id))


def _sleeper(tmp_path: Path, name: str, marker: str | None = None) -> processes.ProcessIdentity:
    """A stand-in process of a run: carries the run's marker when given."""
    popen = processes.spawn(SLEEPER, tmp_path / f"{name}.log", dict(os.environ), marker=marker)
    return processes.identify(popen.pid)


def _timed(fn) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def _parse_all(path: Path) -> None:
    with open(path) as fh:
        for line in fh:
            json.loads(line)


def test_unknown_run_ids_are_not_found_and_never_paths(settings: Settings) -> None:
    for bad in ("nope", "../etc", "a/b", ""):
        with pytest.raises(NotFound, match="rl_list_runs"):
            service.run_status(settings, bad)
        with pytest.raises(NotFound):
            service.read_log(settings, bad, "trainer")


def test_logs_are_tail_limited_and_process_names_checked(settings: Settings, registry: Registry) -> None:
    run_dir = _add_run(settings, registry, "r1", RunState.COMPLETED)
    (run_dir / "logs" / "trainer.log").write_text("".join(f"line {i}\n" for i in range(1000)))
    text = service.read_log(settings, "r1", "trainer", tail=5)
    assert text.splitlines()[1:] == [f"line {i}" for i in range(995, 1000)]
    assert "last 5 lines" in text.splitlines()[0]
    assert len(service.read_log(settings, "r1", "trainer").splitlines()) == service.DEFAULT_LOG_TAIL + 1
    for bad in ("../../state.db", "trainer.log", "nope"):
        with pytest.raises(NotFound, match="api, trainer, env, supervisor"):
            service.read_log(settings, "r1", bad)
    assert "does not exist yet" in service.read_log(settings, "r1", "env")


def test_stopping_an_ended_run_is_a_no_op_that_says_so(settings: Settings, registry: Registry) -> None:
    _add_run(settings, registry, "done", RunState.COMPLETED)
    result = service.stop_run(settings, "done")
    assert not result.was_running and result.status == RunState.COMPLETED
    assert "already ended" in result.message
    assert registry.get_run("done").state == RunState.COMPLETED


def test_a_status_read_of_a_dead_run_writes_nothing_and_the_repair_records_it(
    tmp_path: Path, settings: Settings, registry: Registry
) -> None:
    dead = _sleeper(tmp_path, "dead-supervisor")
    processes.stop_group(dead.pid, dead.pgid, dead.create_time, 2)
    run_dir = _add_run(settings, registry, "r1", RunState.RUNNING, supervisor=dead)
    (run_dir / "metrics.jsonl").write_text(json.dumps({"step": 1, "reward/mean": 0.25}) + "\n")
    before = state_footprint(settings.home)
    status = service.run_status(settings, "r1", repair=False)
    listed = service.list_runs(settings, repair=False)
    # It reads as failed at once, with the cause, and nothing on disk changed.
    assert status.status == RunState.FAILED and "supervisor" in status.error and status.metrics.step == 1
    assert listed.runs[0].status == RunState.FAILED
    assert state_footprint(settings.home) == before
    assert registry.get_run("r1").state == RunState.RUNNING
    # The server's watcher records it (and a detached stopper ends what is left).
    assert service.repair_dead_runs(settings) == ["r1"]
    assert registry.get_run("r1").state == RunState.FAILED and "supervisor" in registry.get_run("r1").cause
    assert service.repair_dead_runs(settings) == []


def test_status_is_fast_and_reads_only_the_end_of_the_metrics(
    tmp_path: Path, settings: Settings, registry: Registry
) -> None:
    sup = _sleeper(tmp_path, "sup")
    try:
        for run_id, steps in (("long", 20000), ("short", 10)):
            run_dir = _add_run(settings, registry, run_id, RunState.RUNNING, supervisor=sup)
            with open(run_dir / "metrics.jsonl", "w") as fh:
                for step in range(1, steps + 1):
                    row = {"step": step, "reward/mean": step / 1e5, "train/loss": 1.0, "pad": "x" * 200}
                    fh.write(json.dumps(row) + "\n")
            (run_dir / "trainer_status.json").write_text(
                json.dumps(
                    {"phase": "training", "step": steps, "num_steps": 30000, "wandb_url": "https://wandb.ai/x/y/runs/z"}
                )
            )
        long_file = settings.runs_dir / "long" / "metrics.jsonl"
        # Against references measured here and now, interleaved (a machine's speed and load cancel
        # out): the status of a 4.8 MB metrics file costs about what a 10-line one costs, and far
        # less than parsing the file whole (~60 ms: what a status reading the whole file would at
        # least cost). Medians of 9: CI once saw one 10-line status at 2.6 ms beside four at
        # 7-10 ms (three test processes on 2 cores), and a minimum took that outlier as the norm.
        long, short, whole = [], [], []
        for _ in range(9):
            long.append(_timed(lambda: service.run_status(settings, "long")))
            short.append(_timed(lambda: service.run_status(settings, "short")))
            whole.append(_timed(lambda: _parse_all(long_file)))
        print(
            f"status {median(long) * 1000:.1f} ms (10 lines: {median(short) * 1000:.1f} ms), "
            f"parsing {median(whole) * 1000:.1f} ms"
        )
        assert median(long) < 2 * median(short) + 0.003 and median(long) < median(whole) / 3, (long, short, whole)
        status = service.run_status(settings, "long")
        assert status.metrics.step == 20000 and status.metrics.num_steps == 30000
        assert status.wandb_url == "https://wandb.ai/x/y/runs/z" and status.trainer_phase == "training"
    finally:
        processes.stop_group(sup.pid, sup.pgid, sup.create_time, 2)


def test_list_runs_newest_first_with_latest_reward(settings: Settings, registry: Registry) -> None:
    _add_run(settings, registry, "old", RunState.COMPLETED, created_at=1000.0)
    run_dir = _add_run(settings, registry, "new", RunState.COMPLETED, created_at=2000.0)
    (run_dir / "metrics.jsonl").write_text(
        json.dumps({"step": 1, "reward/mean": 0.1}) + "\n" + json.dumps({"step": 2, "reward/mean": 0.7}) + "\n"
    )
    listing = service.list_runs(settings)
    assert [r.run_id for r in listing.runs] == ["new", "old"] and listing.count == 2
    assert listing.runs[0].latest_reward == 0.7 and listing.runs[0].step == 2
    assert listing.runs[1].latest_reward is None


def test_reconcile_fails_runs_whose_supervisor_died_and_ends_their_processes(
    tmp_path: Path, settings: Settings, registry: Registry
) -> None:
    dead = _sleeper(tmp_path, "dead-supervisor")
    processes.stop_group(dead.pid, dead.pgid, dead.create_time, 2)
    _add_run(settings, registry, "orphan", RunState.RUNNING, supervisor=dead)
    leftover = _sleeper(tmp_path, "trainer", _marker(settings, "orphan"))
    registry.set_process(
        "orphan",
        "trainer",
        state=ProcState.RUNNING,
        pid=leftover.pid,
        pgid=leftover.pgid,
        create_time=leftover.create_time,
    )
    alive_sup = _sleeper(tmp_path, "live-supervisor")
    try:
        _add_run(settings, registry, "healthy", RunState.RUNNING, supervisor=alive_sup)
        _add_run(settings, registry, "launching", RunState.STARTING)  # no supervisor pid yet, just created
        _add_run(settings, registry, "never", RunState.STARTING, created_at=time.time() - 3600)
        report = service.reconcile(settings, Policy(stop_grace_s=2, trainer_stop_grace_s=2))
        assert sorted(report.failed) == ["never", "orphan"] and report.checked == 4
        orphan = registry.get_run("orphan")
        assert orphan.state == RunState.FAILED and f"supervisor (pid {dead.pid}) died" in orphan.cause
        assert not processes.is_alive(leftover.pid, leftover.create_time)
        assert registry.get_run("healthy").state == RunState.RUNNING
        assert registry.get_run("launching").state == RunState.STARTING
        assert "never started" in registry.get_run("never").cause
    finally:
        processes.stop_group(alive_sup.pid, alive_sup.pgid, alive_sup.create_time, 2)


def test_stop_without_a_supervisor_ends_the_recorded_groups(
    tmp_path: Path, settings: Settings, registry: Registry
) -> None:
    dead = _sleeper(tmp_path, "dead-supervisor")
    processes.stop_group(dead.pid, dead.pgid, dead.create_time, 2)
    _add_run(settings, registry, "r1", RunState.RUNNING, supervisor=dead)
    procs = {name: _sleeper(tmp_path, name, _marker(settings, "r1")) for name in ("api", "trainer", "env")}
    for name, ident in procs.items():
        registry.set_process(
            "r1", name, state=ProcState.RUNNING, pid=ident.pid, pgid=ident.pgid, create_time=ident.create_time
        )
    result = service.stop_run(settings, "r1", Policy(stop_grace_s=2, trainer_stop_grace_s=2))
    assert result.was_running and result.status == RunState.STOPPED and result.processes_left == []
    assert all(not processes.is_alive(i.pid, i.create_time) for i in procs.values())
    stopped = [e.subject for e in registry.events("r1") if e.state == "stopped" and e.subject != "run"]
    assert stopped == ["env", "trainer", "api"]


STUBBORN = [
    sys.executable,
    "-c",
    "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nwhile True: time.sleep(1)",
]


def test_status_of_a_run_whose_supervisor_died_is_failed_at_once_and_cleanup_follows(
    tmp_path: Path, settings: Settings, registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MCP_RL_TRAINER_STOP_GRACE", "3")
    dead = _sleeper(tmp_path, "dead-supervisor")
    processes.stop_group(dead.pid, dead.pgid, dead.create_time, 2)
    _add_run(settings, registry, "r1", RunState.RUNNING, supervisor=dead)
    popen = processes.spawn(STUBBORN, tmp_path / "trainer.log", dict(os.environ), marker=_marker(settings, "r1"))
    wait_for(lambda: processes.identify(popen.pid), 5, "the stubborn trainer")
    trainer = processes.identify(popen.pid)
    registry.set_process(
        "r1", "trainer", state=ProcState.RUNNING, pid=trainer.pid, pgid=trainer.pgid, create_time=trainer.create_time
    )
    started = time.perf_counter()
    status = service.run_status(settings, "r1")
    assert time.perf_counter() - started < 2.5  # the 3 s grace is not waited for here
    assert status.status == RunState.FAILED and "supervisor" in status.error
    wait_for(lambda: popen.poll() is not None, 20, "the leftover trainer to be killed after its grace")


def test_reconcile_ends_processes_left_alive_by_an_ended_run(
    tmp_path: Path, settings: Settings, registry: Registry
) -> None:
    dead = _sleeper(tmp_path, "dead-supervisor")
    processes.stop_group(dead.pid, dead.pgid, dead.create_time, 2)
    _add_run(settings, registry, "r1", RunState.FAILED, supervisor=dead)
    env = _sleeper(tmp_path, "env", _marker(settings, "r1"))
    registry.set_process("r1", "env", state=ProcState.RUNNING, pid=env.pid, pgid=env.pgid, create_time=env.create_time)
    report = service.reconcile(settings, Policy(stop_grace_s=2, trainer_stop_grace_s=2))
    assert report.cleaned == ["r1"] and report.failed == []
    assert not processes.is_alive(env.pid, env.create_time)
    assert registry.ended_runs_with_live_processes() == []


def test_status_takes_accuracy_from_the_environment_metrics(settings: Settings, registry: Registry) -> None:
    run_dir = _add_run(settings, registry, "r2", RunState.COMPLETED)
    (run_dir / "metrics.jsonl").write_text(json.dumps({"step": 2, "reward/mean": 0.5, "train/loss": 0.1}) + "\n")
    (run_dir / "env_metrics.jsonl").write_text(
        json.dumps({"step": 2, "train/percent_correct": 0.625, "reward/mean": 0.9}) + "\n"
    )
    metrics = service.run_status(settings, "r2").metrics
    assert metrics.percent_correct == 0.625
    assert metrics.reward_mean == 0.5  # the trainer's own value wins


def test_stop_never_signals_a_process_it_cannot_prove_is_the_run_s(
    tmp_path: Path, settings: Settings, registry: Registry
) -> None:
    """Issue 18.1: a row whose start time is missing (or whose process lacks the run's marker)
    once made stop SIGTERM/SIGKILL whatever held that pid, even init. Strangers the test starts
    (not its children, no marker) stand in for unrelated processes."""
    strangers = {name: Stranger(tmp_path, name) for name in ("supervisor", "trainer", "env")}
    api = _sleeper(tmp_path, "api", _marker(settings, "r1"))
    try:
        _add_run(settings, registry, "r1", RunState.RUNNING)
        registry.update_run("r1", supervisor_pid=strangers["supervisor"].pid, supervisor_create_time=None)
        registry.set_process(
            "r1",
            "trainer",
            state=ProcState.RUNNING,
            pid=strangers["trainer"].pid,
            pgid=strangers["trainer"].pid,
            create_time=None,
        )
        # Start time right, but no marker of the run: still not provably the run's.
        registry.set_process(
            "r1",
            "env",
            state=ProcState.RUNNING,
            pid=strangers["env"].pid,
            pgid=strangers["env"].pid,
            create_time=strangers["env"].create_time,
        )
        registry.set_process(
            "r1", "api", state=ProcState.RUNNING, pid=api.pid, pgid=api.pgid, create_time=api.create_time
        )
        result = service.stop_run(settings, "r1", Policy(stop_grace_s=2, trainer_stop_grace_s=2))
        assert all(s.untouched() for s in strangers.values()), {n: s.signals() for n, s in strangers.items()}
        assert not processes.is_alive(api.pid, api.create_time)  # the run's own process was ended
        assert result.status == RunState.STOPPED and result.processes_left == []
        for name, stranger in strangers.items():
            note = next(n for n in result.left_alone if n.startswith(f"{name} pid {stranger.pid}"))
            assert "could not be proven to be this run's" in note and note.endswith("left alone")
            assert f"pid {stranger.pid} could not be proven" in result.message
        assert "No process of the run is left" not in result.message
        assert {e.subject for e in registry.events("r1") if e.state == "left alone"} == set(strangers)
    finally:
        for stranger in strangers.values():
            stranger.close()
        processes.stop_group(api.pid, api.pgid, api.create_time, 2)


def test_reconcile_leaves_alone_a_recorded_pid_it_cannot_prove(
    tmp_path: Path, settings: Settings, registry: Registry
) -> None:
    stranger = Stranger(tmp_path)
    dead = _sleeper(tmp_path, "dead-supervisor")
    processes.stop_group(dead.pid, dead.pgid, dead.create_time, 2)
    try:
        _add_run(settings, registry, "r1", RunState.RUNNING, supervisor=dead)
        registry.set_process(
            "r1", "trainer", state=ProcState.RUNNING, pid=stranger.pid, pgid=stranger.pid, create_time=None
        )
        report = service.reconcile(settings, Policy(stop_grace_s=2, trainer_stop_grace_s=2))
        assert report.failed == ["r1"]
        assert stranger.untouched(), stranger.signals()
        assert any(
            f"pid {stranger.pid} could not be proven" in e.cause
            for e in registry.events("r1")
            if e.state == "left alone"
        )
    finally:
        stranger.close()


def test_stop_continues_a_frozen_supervisor_and_answers_within_the_budget(
    tmp_path: Path, settings: Settings, registry: Registry
) -> None:
    """Issue 18.4: stop on a SIGSTOPped supervisor blocked 206 s."""
    marker = _marker(settings, "r1")
    sup = _sleeper(tmp_path, "supervisor", marker)
    trainer = _sleeper(tmp_path, "trainer", marker)
    os.kill(sup.pid, signal.SIGSTOP)
    try:
        _add_run(settings, registry, "r1", RunState.RUNNING, supervisor=sup)
        registry.set_process(
            "r1",
            "trainer",
            state=ProcState.RUNNING,
            pid=trainer.pid,
            pgid=trainer.pgid,
            create_time=trainer.create_time,
        )
        started = time.monotonic()
        result = service.stop_run(settings, "r1", Policy(stop_grace_s=2, trainer_stop_grace_s=2), budget_s=20)
        assert time.monotonic() - started < 20
        assert result.status == RunState.STOPPED and not result.in_progress and result.processes_left == []
        assert not processes.is_alive(sup.pid, sup.create_time) and not processes.is_alive(
            trainer.pid, trainer.create_time
        )
    finally:
        for ident in (sup, trainer):
            processes.stop_group(ident.pid, ident.pgid, ident.create_time, 2)


def test_a_stop_that_does_not_fit_the_budget_continues_in_the_background_and_says_so(
    tmp_path: Path, settings: Settings, registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MCP_RL_TRAINER_STOP_GRACE", "3")  # read by the detached stopper
    dead = _sleeper(tmp_path, "dead-supervisor")
    processes.stop_group(dead.pid, dead.pgid, dead.create_time, 2)
    _add_run(settings, registry, "r1", RunState.RUNNING, supervisor=dead)
    popen = processes.spawn(STUBBORN, tmp_path / "trainer.log", dict(os.environ), marker=_marker(settings, "r1"))
    trainer = wait_for(lambda: processes.identify(popen.pid), 5, "the stubborn trainer")
    registry.set_process(
        "r1", "trainer", state=ProcState.RUNNING, pid=trainer.pid, pgid=trainer.pgid, create_time=trainer.create_time
    )
    started = time.monotonic()
    result = service.stop_run(settings, "r1", budget_s=1.0)
    assert time.monotonic() - started < 2.5  # the budget, not the trainer's 3 s grace
    assert result.in_progress and result.status == RunState.STOPPING and result.processes_left == [trainer.pid]
    assert "continues in the background" in result.message and "rl_check_status('r1')" in result.message
    wait_for(lambda: registry.get_run("r1").state == RunState.STOPPED, 30, "the detached stopper to finish")
    assert popen.wait(timeout=10) == -signal.SIGKILL  # it ignored SIGTERM for its whole grace
    status = service.run_status(settings, "r1")
    assert status.status == RunState.STOPPED and "still being ended" not in status.message


def test_a_left_alone_process_is_reported_once_however_often_it_is_met(
    tmp_path: Path, settings: Settings, registry: Registry
) -> None:
    stranger = Stranger(tmp_path)
    try:
        _add_run(settings, registry, "r1", RunState.FAILED, created_at=time.time() - 3600)
        registry.set_process(
            "r1", "env", state=ProcState.RUNNING, pid=stranger.pid, pgid=stranger.pid, create_time=None
        )
        for _ in range(3):
            service.reconcile(settings, Policy(stop_grace_s=1, trainer_stop_grace_s=1))
        assert [e.subject for e in registry.events("r1") if e.state == "left alone"] == ["env"]
        listing = service.list_runs(settings)
        assert any(f"env pid {stranger.pid} could not be proven" in note for note in listing.notes), listing.notes
        assert stranger.untouched()
    finally:
        stranger.close()


def test_stopping_an_ended_run_ends_processes_it_left_alive(
    tmp_path: Path, settings: Settings, registry: Registry
) -> None:
    dead = _sleeper(tmp_path, "dead-supervisor")
    processes.stop_group(dead.pid, dead.pgid, dead.create_time, 2)
    _add_run(settings, registry, "r1", RunState.FAILED, supervisor=dead)
    env = _sleeper(tmp_path, "env", _marker(settings, "r1"))  # its clean-up was itself killed
    registry.set_process("r1", "env", state=ProcState.RUNNING, pid=env.pid, pgid=env.pgid, create_time=env.create_time)
    result = service.stop_run(settings, "r1", budget_s=20)
    assert not result.was_running and result.status == RunState.FAILED and not result.in_progress
    assert f"its processes [{env.pid}] were still alive" in result.message and "have been ended" in result.message
    assert not processes.is_alive(env.pid, env.create_time)
    assert "nothing to stop" in service.stop_run(settings, "r1").message
