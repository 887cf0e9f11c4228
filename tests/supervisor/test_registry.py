from __future__ import annotations

import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

import mcp_rl.supervisor.registry as registry_module
from mcp_rl.errors import DamagedState, UserError
from mcp_rl.settings import Settings
from mcp_rl.supervisor.registry import Registry, RunRecord, registry_for
from mcp_rl.supervisor.states import ProcState, RunState
from tests.conftest import make_env
from tests.kit.runs import register, write_run


def _record(run_id: str, created_at: float | None = None, state: RunState = RunState.STARTING) -> RunRecord:
    now = created_at or time.time()
    return RunRecord(
        run_id=run_id,
        environment="arithmetic",
        backend="local",
        state=state,
        created_at=now,
        updated_at=now,
        run_dir=f"/tmp/{run_id}",
        config_path=f"/tmp/{run_id}/run.yaml",
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
        ("starting", "created"),
        ("running", "ready"),
        ("failed", "trainer died"),
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

    threads = [
        threading.Thread(target=end, args=(s,))
        for s in [RunState.FAILED, RunState.COMPLETED, RunState.STOPPING] * 2 + [RunState.FAILED] * 2
    ]
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
        ("trainer", "starting", None),
        ("trainer", "exited", "killed"),
    ]


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
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=open_and_write, args=(i,)) for i in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(Registry(path).list_runs()) == 6 - len(errors)
    assert errors == []


# --- a damaged state.db: kept aside, rebuilt from the run directories, never silently emptied ---
def _home_with_runs(tmp_path: Path) -> tuple[Settings, list[str]]:
    settings = Settings.from_env(make_env(tmp_path / "home"))
    settings.ensure_home()
    write_run(settings, "done1", 3)
    write_run(settings, "live1", 2, state="running")
    return settings, ["done1", "live1"]


def _damage(path: Path, how: str) -> None:
    if how == "garbage":
        path.write_bytes(b"this is not a database\n" * 200)
    elif how == "truncated":
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 2])
    elif how == "directory":
        path.unlink()
        path.mkdir()
        (path / "x").write_text("y")
    elif how == "empty":
        path.write_bytes(b"")
    elif how == "deleted":
        path.unlink()
    for suffix in ("-wal", "-shm"):
        Path(str(path) + suffix).unlink(missing_ok=True)


@pytest.mark.parametrize("how", ["garbage", "truncated", "directory", "empty", "deleted"])
def test_a_damaged_state_db_is_kept_aside_and_rebuilt_from_the_run_dirs(tmp_path: Path, how: str) -> None:
    settings, run_ids = _home_with_runs(tmp_path)
    db = sqlite3.connect(settings.state_db)
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # fold the WAL in, as after a clean close
    db.close()
    original = settings.state_db.read_bytes()
    _damage(settings.state_db, how)
    reg = registry_for(settings)
    runs = {r.run_id: r for r in reg.list_runs()}
    assert sorted(runs) == run_ids
    # done1's trainer said "done"; live1 has no supervisor running, so it cannot be running.
    assert runs["done1"].state == RunState.COMPLETED
    assert runs["live1"].state == RunState.FAILED and "no supervisor of it is running" in runs["live1"].cause
    assert runs["done1"].environment == "toy" and runs["done1"].backend == "local"
    assert any("rebuilt" in note for note in reg.notes), reg.notes
    aside = sorted(p for p in settings.home.glob("state.damaged-*") if not p.name.endswith(("-wal", "-shm")))
    if how in ("garbage", "truncated", "directory"):
        assert len(aside) == 1 and any("kept as" in note for note in reg.notes)
        if how == "truncated":
            assert aside[0].read_bytes() == original[: len(original) // 2]
    else:
        assert aside == []
    # The rebuilt registry works as before, and a second opener finds nothing to repair.
    reg.transition("live1", RunState.RUNNING)  # failed stays failed: the state machine holds
    again = registry_for(settings)
    assert [r.run_id for r in again.list_runs()] == [r.run_id for r in reg.list_runs()] and again.notes == []


def test_threads_finding_one_damaged_state_db_keep_its_bytes_and_one_sound_registry(tmp_path: Path) -> None:
    # A server's threads (tool calls, the run watcher, the start-up reconcile) open registries at
    # once. A connection still open while another thread moved the file aside used to write into
    # the moved copy (through the new file's WAL): the damaged bytes were lost, in ~1 of 10 homes.
    for attempt in range(25):
        settings, run_ids = _home_with_runs(tmp_path / str(attempt))
        db = sqlite3.connect(settings.state_db)
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        db.close()
        _damage(settings.state_db, "truncated")
        damaged = settings.state_db.read_bytes()
        start = threading.Barrier(3)
        errors: list[BaseException] = []

        def use_it() -> None:
            start.wait()
            for _ in range(4):
                try:
                    registry_for(settings).list_runs()
                except BaseException as exc:  # reported below
                    errors.append(exc)

        threads = [threading.Thread(target=use_it) for _ in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        assert not errors, errors
        kept = [p for p in settings.home.glob("state.damaged-*") if p.read_bytes() == damaged]
        assert kept, f"attempt {attempt}: the damaged bytes are gone: {sorted(settings.home.iterdir())}"
        assert sorted(r.run_id for r in registry_for(settings).list_runs()) == run_ids


def test_one_bad_row_is_reported_and_skipped(tmp_path: Path) -> None:
    settings, _ = _home_with_runs(tmp_path)
    db = sqlite3.connect(settings.state_db, isolation_level=None)
    db.execute("UPDATE runs SET state = 'exploded', created_at = 'yesterday' WHERE run_id = 'done1'")
    db.close()
    reg = registry_for(settings)
    assert [r.run_id for r in reg.list_runs()] == ["live1"]
    assert len(reg.notes) == 1 and "done1" in reg.notes[0] and "state" in reg.notes[0]
    with pytest.raises(DamagedState, match="registry row of run 'done1' is damaged"):
        reg.get_run("done1")


def test_a_row_rebuilt_while_its_run_was_being_started_gives_way_to_the_real_one(tmp_path: Path) -> None:
    settings = Settings.from_env(make_env(tmp_path / "home"))
    write_run(settings, "r1", 2, state=None)  # run.yaml written, the row not created yet
    reg = registry_for(settings)  # a fresh state.db: r1 is rebuilt (failed: no supervisor)
    assert reg.get_run("r1").state == RunState.FAILED
    register(settings, "r1", settings.runs_dir / "r1", "starting")
    assert reg.get_run("r1").state == RunState.STARTING


def test_a_state_db_that_stays_unusable_says_so_in_words(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    settings, _ = _home_with_runs(tmp_path)
    reg = registry_for(settings)
    holder = sqlite3.connect(settings.state_db, timeout=0, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    monkeypatch.setattr(registry_module, "BUSY_TIMEOUT_MS", 100)
    try:
        with pytest.raises(UserError, match="could not be used .*busy.*Runs and their files are safe"):
            reg.transition("live1", RunState.FAILED, "x")
    finally:
        holder.execute("ROLLBACK")
        holder.close()


def test_a_lock_file_that_cannot_be_opened_says_so_in_words(tmp_path: Path) -> None:
    settings, _ = _home_with_runs(tmp_path)
    lock = settings.state_db.with_name("state.db.init.lock")
    lock.unlink(missing_ok=True)
    lock.mkdir()  # opening it for appending fails (as a read-only home would)
    with pytest.raises(
        UserError, match="could not be used .*lock file cannot be opened.*Runs and their files are safe"
    ):
        registry_for(settings).list_runs()
    assert settings.state_db.is_file()  # nothing was moved aside or rebuilt


def test_rows_still_readable_in_a_damaged_state_db_are_kept(tmp_path: Path) -> None:
    # A run without a run folder can only come back from the damaged copy itself.
    settings = Settings.from_env(make_env(tmp_path / "home"))
    reg = registry_for(settings)
    reg.create_run(_record("only-in-db", state=RunState.STARTING))
    reg.set_process("only-in-db", "trainer", state=ProcState.RUNNING, pid=4242, create_time=5.0)
    for _ in range(400):  # history pages after the runs table's
        reg.record_event("only-in-db", "trainer", "noise", "x" * 200)
    db = sqlite3.connect(settings.state_db)
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()
    data = bytearray(settings.state_db.read_bytes())
    data[-20_000:] = b"\xde\xad" * 10_000  # the newest pages (events) are garbage
    settings.state_db.write_bytes(bytes(data))
    for suffix in ("-wal", "-shm"):
        Path(f"{settings.state_db}{suffix}").unlink(missing_ok=True)
    reg = registry_for(settings)
    reg.events("only-in-db")  # reads the damaged pages: the damage is found and repaired
    assert reg.get_run("only-in-db") is not None, reg.notes
    (proc,) = reg.processes("only-in-db")
    assert (proc.pid, proc.create_time) == (4242, 5.0)  # what stop needs to prove identity
    assert any("still readable" in note for note in reg.notes), reg.notes


def test_a_run_whose_supervisor_still_runs_is_rebuilt_as_running(tmp_path: Path) -> None:
    settings = Settings.from_env(make_env(tmp_path / "home"))
    run_dir = write_run(settings, "going", 5, state=None)  # trainer phase "training", no row yet
    # A stand-in supervisor this test owns: its command line names the run dir like the real one.
    standin = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; sys.stdin.read()",
            "mcp_rl.supervisor",
            "--run-dir",
            str(run_dir.resolve()),
        ],
        stdin=subprocess.PIPE,
    )
    try:
        run = registry_for(settings).get_run("going")
        assert run.state == RunState.RUNNING and run.supervisor_pid == standin.pid
        assert run.supervisor_create_time == pytest.approx(psutil.Process(standin.pid).create_time())
    finally:
        standin.stdin.close()
        standin.wait(10)


def test_a_rebuilt_cluster_run_finds_its_job_again_from_its_submission(tmp_path: Path) -> None:
    from mcp_rl.supervisor.launchers.base import SUBMISSION_FILE, Submission

    settings = Settings.from_env(make_env(tmp_path / "home"))
    run_dir = write_run(settings, "on-ray", 3, state=None)  # trainer phase "training", no row yet
    submission = Submission(
        launcher="ray",
        job_id="raysubmit_abc",
        command="POST /api/jobs/",
        python=sys.executable,
        address="127.0.0.1:8265",
    )
    (run_dir / SUBMISSION_FILE).write_text(submission.model_dump_json())
    run = registry_for(settings).get_run("on-ray")
    # Not failed for want of a local supervisor: its job is on the cluster, and the scheduler is asked.
    assert (run.launcher, run.job_id, run.job_address) == ("ray", "raysubmit_abc", "127.0.0.1:8265")
    assert run.state == RunState.RUNNING and run.on_cluster and "ray job raysubmit_abc" in (run.cause or "")
