"""`mcp-rl runs list|status|logs|stop` read and change the same state as the MCP tools.

Runs are recorded through the real registry, with real run folders and, for the stop, real
process groups standing in for a run's supervisor and trainer; the CLI runs as a subprocess.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from mcp_rl import processes
from mcp_rl.settings import Settings
from mcp_rl.supervisor import service
from mcp_rl.supervisor.states import ProcState, RunState, run_marker
from tests.conftest import REPO, make_env
from tests.kit.runs import run_record

SLEEPER = [sys.executable, "-c", "import time\nwhile True: time.sleep(1)"]


def cli(
    home: Path, *args: str, timeout: float = 120, extra: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    env = make_env(home, **(extra or {}))
    env["PATH"] = os.environ.get("PATH", "")
    return subprocess.run(
        [sys.executable, "-m", "mcp_rl", "runs", *args],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def add_run(settings: Settings, run_id: str, supervisor: processes.ProcessIdentity | None = None) -> Path:
    registry = service.registry_for(settings)
    run_dir = settings.runs_dir / run_id
    (run_dir / "logs").mkdir(parents=True)
    (run_dir / "run.yaml").write_text(f"run_id: {run_id}\n")
    registry.create_run(
        run_record(
            run_id,
            run_dir,
            supervisor_pid=supervisor.pid if supervisor else None,
            supervisor_create_time=supervisor.create_time if supervisor else None,
        )
    )
    registry.transition(run_id, RunState.RUNNING, "ready")
    return run_dir


def sleeper(tmp_path: Path, name: str, marker: str | None = None) -> processes.ProcessIdentity:
    """A stand-in process; with the run's marker it is provably the run's."""
    popen = processes.spawn(SLEEPER, tmp_path / f"{name}.log", dict(os.environ), marker=marker)
    identity = processes.identify(popen.pid)
    assert identity is not None
    return identity


def test_runs_commands_over_the_shared_state(tmp_path: Path, home: Path, settings: Settings) -> None:
    empty = cli(home, "list")
    assert empty.returncode == 0 and "No runs yet" in empty.stdout

    done_dir = add_run(settings, "done01")
    rows = [
        {"step": s, "time": time.time(), "reward/mean": r, "train/loss": 0.5 / s}
        for s, r in ((1, 0.25), (2, 0.5), (3, 0.8125))
    ]
    (done_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (done_dir / "logs" / "trainer.log").write_text("".join(f"trainer line {i}\n" for i in range(1, 11)))
    service.registry_for(settings).transition("done01", RunState.COMPLETED, "trainer finished its last step")

    live_marker = run_marker(str(settings.runs_dir / "live01"))
    supervisor = sleeper(tmp_path, "supervisor", live_marker)
    trainer = sleeper(tmp_path, "trainer", live_marker)
    add_run(settings, "live01", supervisor=supervisor)
    service.registry_for(settings).set_process(
        "live01",
        "trainer",
        state=ProcState.RUNNING,
        pid=trainer.pid,
        pgid=trainer.pgid,
        create_time=trainer.create_time,
    )
    try:
        listed = cli(home, "list")
        assert listed.returncode == 0, listed.stderr
        lines = listed.stdout.splitlines()
        assert lines[0].split()[:3] == ["RUN", "ID", "ENVIRONMENT"]
        done_line = next(line for line in lines if line.startswith("done01"))
        assert "completed" in done_line and "0.812" in done_line and " 3 " in done_line
        assert any(line.startswith("live01") and "running" in line for line in lines)
        as_json = json.loads(cli(home, "list", "--json").stdout)
        assert as_json["count"] == 2 and {r["run_id"] for r in as_json["runs"]} == {"done01", "live01"}

        status = cli(home, "status", "done01")
        assert status.returncode == 0 and "completed" in status.stdout and "reward mean 0.812" in status.stdout
        assert json.loads(cli(home, "status", "done01", "--json").stdout)["metrics"]["step"] == 3

        logs = cli(home, "logs", "done01", "--process", "trainer", "--tail", "2")
        assert logs.returncode == 0 and logs.stdout.splitlines()[-2:] == ["trainer line 9", "trainer line 10"]
        assert "trainer line 8" not in logs.stdout
        # --follow on a run that has ended prints the tail and returns.
        followed = cli(home, "logs", "done01", "-n", "1", "--follow", timeout=60)
        assert followed.returncode == 0 and followed.stdout.strip().endswith("trainer line 10")

        stopped = cli(home, "stop", "live01")
        assert stopped.returncode == 0, stopped.stdout + stopped.stderr
        assert "No process of the run is left" in stopped.stdout
        assert not processes.is_alive(supervisor.pid, supervisor.create_time)
        assert not processes.is_alive(trainer.pid, trainer.create_time)
        assert json.loads(cli(home, "status", "live01", "--json").stdout)["status"] == "stopped"

        again = cli(home, "stop", "live01")
        assert again.returncode == 0 and "already ended" in again.stdout
    finally:
        for ident in (supervisor, trainer):
            processes.stop_group(ident.pid, ident.pgid, ident.create_time, 2)


def test_unknown_run_is_a_clear_error(home: Path) -> None:
    for args in (("status", "nope"), ("logs", "nope"), ("stop", "nope")):
        result = cli(home, *args)
        assert result.returncode == 2
        assert "Unknown run_id 'nope'" in result.stderr and "Traceback" not in result.stderr


STUBBORN = [
    sys.executable,
    "-c",
    "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nwhile True: time.sleep(1)",
]


def test_status_after_the_supervisor_died_ends_the_processes_after_the_command_exits(
    tmp_path: Path, home: Path, settings: Settings
) -> None:
    """Issue 18.3: the clean-up ran in a daemon thread that died with the short-lived command."""
    marker = run_marker(str(settings.runs_dir / "orphan"))
    dead = sleeper(tmp_path, "dead-supervisor", marker)
    processes.stop_group(dead.pid, dead.pgid, dead.create_time, 2)
    add_run(settings, "orphan", supervisor=dead)
    api = processes.spawn(SLEEPER, tmp_path / "api.log", dict(os.environ), marker=marker)
    trainer = processes.spawn(STUBBORN, tmp_path / "trainer.log", dict(os.environ), marker=marker)
    registry = service.registry_for(settings)
    for name, popen in (("api", api), ("trainer", trainer)):
        ident = processes.identify(popen.pid)
        registry.set_process(
            "orphan", name, state=ProcState.RUNNING, pid=ident.pid, pgid=ident.pgid, create_time=ident.create_time
        )
    try:
        status = cli(home, "status", "orphan", extra={"MCP_RL_TRAINER_STOP_GRACE": "4"})
        assert status.returncode == 0, status.stderr
        assert "failed" in status.stdout and f"supervisor (pid {dead.pid}) died" in status.stdout
        # The command has exited; the trainer ignores SIGTERM for its 4 s grace, so it is still there.
        assert "still being ended in the background" in status.stdout
        during = cli(home, "list")
        line = next((x for x in during.stdout.splitlines() if x.startswith("Run orphan (failed): Its processes")), "")
        assert (str(trainer.pid) in line and "still being ended" in line) or trainer.poll() is not None, during.stdout
        assert api.wait(timeout=30) == -15 and trainer.wait(timeout=30) == -9
        listed = cli(home, "list")
        assert "still being ended" not in listed.stdout and "orphan" in listed.stdout
    finally:
        for popen in (api, trainer):
            ident = processes.identify(popen.pid)
            if ident is not None:
                processes.stop_group(ident.pid, ident.pgid, ident.create_time, 2)
