from __future__ import annotations

import threading
import time
from pathlib import Path

from mcp_rl.supervisor.registry import Registry, RunRecord
from mcp_rl.supervisor.states import ProcState, RunState


def _record(run_id: str, created_at: float | None = None, state: RunState = RunState.STARTING) -> RunRecord:
    now = created_at or time.time()
    return RunRecord(
        run_id=run_id, environment="arithmetic", backend="local", state=state,
        created_at=now, updated_at=now, run_dir=f"/tmp/{run_id}", config_path=f"/tmp/{run_id}/run.yaml",
    )


def test_transitions_follow_the_state_machine(tmp_path: Path) -> None:
    reg = Registry(tmp_path / "state.db")
    reg.create_run(_record("r1"), cause="created")
    assert not reg.transition("r1", RunState.COMPLETED, "too early")  # starting -> completed is not allowed
    assert reg.transition("r1", RunState.RUNNING, "ready")
    assert reg.get_run("r1").running_at is not None
    assert reg.transition("r1", RunState.FAILED, "trainer died")
    assert not reg.transition("r1", RunState.STOPPING, "late stop")  # terminal stays terminal
    run = reg.get_run("r1")
    assert run.state == RunState.FAILED and run.cause == "trainer died" and run.ended_at is not None
    assert [(e.state, e.cause) for e in reg.events("r1")] == [
        ("starting", "created"), ("running", "ready"), ("failed", "trainer died"),
    ]


def test_concurrent_end_transitions_have_one_winner(tmp_path: Path) -> None:
    reg = Registry(tmp_path / "state.db")
    reg.create_run(_record("r1", state=RunState.STARTING))
    reg.transition("r1", RunState.RUNNING)
    results: list[bool] = []
    barrier = threading.Barrier(8)

    def end(state: RunState) -> None:
        barrier.wait()
        results.append(Registry(tmp_path / "state.db").transition("r1", state, f"by {state}"))

    threads = [threading.Thread(target=end, args=(s,)) for s in [RunState.FAILED, RunState.COMPLETED, RunState.STOPPING] * 2 + [RunState.FAILED] * 2]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results.count(True) == 1
    assert len([e for e in reg.events("r1") if e.state != "starting" and e.state != "running"]) == 1


def test_list_runs_newest_first_and_survives_reopen(tmp_path: Path) -> None:
    reg = Registry(tmp_path / "state.db")
    reg.create_run(_record("old", created_at=1000.0))
    reg.create_run(_record("new", created_at=2000.0))
    assert [r.run_id for r in Registry(tmp_path / "state.db").list_runs()] == ["new", "old"]
    assert [r.run_id for r in reg.list_runs(frozenset({RunState.STARTING}))] == ["new", "old"]


def test_processes_and_active_ports(tmp_path: Path) -> None:
    reg = Registry(tmp_path / "state.db")
    reg.create_run(_record("a"))
    reg.create_run(_record("b"))
    reg.update_run("a", api_port=41001, inference_port=41002)
    reg.update_run("b", api_port=41003, inference_port=41004)
    reg.transition("b", RunState.FAILED, "x")
    assert reg.active_ports() == {41001, 41002}
    reg.set_process("a", "trainer", state=ProcState.STARTING, pid=123, pgid=123, create_time=5.0, port=41002)
    reg.set_process("a", "trainer", cause="killed", state=ProcState.EXITED, exit_code=-9)
    (proc,) = reg.processes("a")
    assert (proc.state, proc.pid, proc.exit_code, proc.port) == (ProcState.EXITED, 123, -9, 41002)
    assert [(e.subject, e.state, e.cause) for e in reg.events("a")][-2:] == [
        ("trainer", "starting", None), ("trainer", "exited", "killed"),
    ]


def test_status_checks_are_recorded(tmp_path: Path) -> None:
    reg = Registry(tmp_path / "state.db")
    reg.create_run(_record("a"))
    assert reg.last_check("a") is None
    reg.record_check("a", RunState.RUNNING, 10.0)
    reg.record_check("a", RunState.COMPLETED, 20.0)
    check = reg.last_check("a")
    assert (check.checked_at, check.state) == (20.0, RunState.COMPLETED)


def test_first_openers_racing_on_a_fresh_file_all_get_a_working_registry(tmp_path: Path) -> None:
    # The server's reconciler and its first tool call open a new state.db at the same moment.
    errors: list[BaseException] = []
    for round_ in range(60):
        path = tmp_path / f"r{round_}" / "state.db"
        barrier = threading.Barrier(6)

        def open_and_write(i: int, path: Path = path, barrier: threading.Barrier = barrier) -> None:
            barrier.wait()
            try:
                Registry(path).create_run(_record(f"run{i}"))
            except BaseException as exc:  # noqa: BLE001 - collected and asserted below
                errors.append(exc)

        threads = [threading.Thread(target=open_and_write, args=(i,)) for i in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(Registry(path).list_runs()) == 6 - len(errors)
    assert errors == []
