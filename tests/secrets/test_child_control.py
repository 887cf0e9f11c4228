"""The validator's child is kept under control, whatever the task's code does at import:

- prints 200 MB: the server keeps only a bounded part of it (and its memory does not grow by it);
- forks a `sleep` that holds its stdout: the validation still ends as soon as the child does;
- starts a detached grandchild (its own session): it does not outlive the validation;
- loops forever: the deadline ends it, and so does cancel;
- its server is killed with -9: the child ends by itself (lifeline), and a restarted server ends
  one left behind by its marker (end_orphans).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import psutil
import pytest

from mcp_rl import processes
from mcp_rl.environments.child import KEEP_BYTES, ChildRecord, children_dir, end_orphans, run_child
from mcp_rl.environments.discovery import EnvironmentInfo, parse_file
from mcp_rl.environments.validate import validate
from mcp_rl.errors import UserError
from mcp_rl.settings import Settings
from tests.conftest import make_env
from tests.kit.wait import WaitTimeout, wait_for_async

TASK = """
from mcp_rl.task import Task


class Probe(Task):
    name = "{name}"
    train_seeds = range(5)
    held_out_seeds = range(5, 10)

    def item(self, seed):
        return {{"q": f"say {{seed}}", "answer": str(seed)}}

    def prompt(self, item):
        return item["q"]

    def score(self, completion, item):
        return 1.0 if completion.strip() == item["answer"] else 0.0
"""


def task_file(folder: Path, name: str, at_import: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.py"
    path.write_text(textwrap.dedent(at_import) + TASK.format(name=name), encoding="utf-8")
    return path


def info(path: Path) -> EnvironmentInfo:
    (env,) = parse_file(path)
    return env


def gone(pid: int, within_s: float) -> bool:
    return processes.wait_until(lambda: not psutil.pid_exists(pid) or _zombie(pid), time.monotonic() + within_s)


def _zombie(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@pytest.fixture
def settings(home: Path) -> Settings:
    return Settings.from_env(make_env(home))


def test_200_mb_of_output_is_read_but_not_kept(settings: Settings, tmp_path: Path) -> None:
    path = task_file(
        tmp_path / "envs",
        "loud",
        """
        import sys
        _chunk = "x" * (1 << 20) + "\\n"
        for _ in range(100):
            sys.stdout.write(_chunk)
            sys.stderr.write(_chunk)
        sys.stdout.flush()
        sys.stderr.flush()
        """,
    )
    me = psutil.Process()
    before = me.memory_info().rss
    outcome = run_child(
        settings,
        "mcp_rl.environments.validate_child",
        [str(path), "Probe", str(path.parent)],
        env=settings.user_code_env(),
        timeout_s=120,
        what="test",
    )
    grew = me.memory_info().rss - before
    assert outcome.report is not None and outcome.report["ok"] is True, outcome.tail()
    for stream in (outcome.stdout, outcome.stderr):
        assert stream.total >= 100 << 20  # all of it was read (the child was never blocked)
        assert len(stream.head) + len(stream.tail) <= 2 * KEEP_BYTES
        assert stream.dropped >= (100 << 20) - 2 * KEEP_BYTES
    assert "bytes not kept" in outcome.stdout.text()
    assert grew < 50 << 20, f"the parent grew by {grew / 2**20:.0f} MB reading 200 MB of output"


def test_a_sleep_holding_stdout_does_not_keep_the_validation_alive(settings: Settings, tmp_path: Path) -> None:
    pid_file = tmp_path / "sleep.pid"
    path = task_file(
        tmp_path / "envs",
        "holder",
        f"""
        import subprocess
        _p = subprocess.Popen(["sleep", "300"])  # inherits stdout and stderr: the pipes stay open
        open({str(pid_file)!r}, "w").write(str(_p.pid))
        """,
    )
    began = time.monotonic()
    report = validate(settings, info(path), sample=False, timeout_s=120)
    took = time.monotonic() - began
    assert report.ok, report.problems
    assert took < 30, f"the validation waited {took:.0f} s for a sleep holding its stdout"
    assert gone(int(pid_file.read_text()), 5), "the sleep the task forked outlived the validation"


def test_a_detached_grandchild_does_not_outlive_the_validation(settings: Settings, tmp_path: Path) -> None:
    pid_file = tmp_path / "detached.pid"
    path = task_file(
        tmp_path / "envs",
        "detacher",
        f"""
        import subprocess
        _p = subprocess.Popen(
            ["sleep", "300"], start_new_session=True,
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        open({str(pid_file)!r}, "w").write(str(_p.pid))
        """,
    )
    report = validate(settings, info(path), sample=False, timeout_s=120)
    assert report.ok, report.problems
    pid = int(pid_file.read_text())
    assert gone(pid, 5), "a grandchild in its own session outlived the validation"
    assert list(children_dir(settings).glob("*.json")) == []  # the running-child record is gone too


LOOP = """
import os
open(os.environ["PID_FILE"], "w").write(str(os.getpid()))
while True:
    pass
"""


def test_a_looping_task_is_ended_by_the_deadline_and_by_cancel(settings: Settings, tmp_path: Path) -> None:
    pid_file = tmp_path / "loop.pid"
    path = task_file(tmp_path / "envs", "spinner", LOOP)
    env = info(path).model_copy(update={"env_vars": ["PID_FILE"]})
    os.environ["PID_FILE"] = str(pid_file)
    try:
        began = time.monotonic()
        with pytest.raises(UserError, match="took over 3 s and was stopped"):
            validate(settings, env, sample=False, timeout_s=3)
        assert time.monotonic() - began < 20
        assert gone(int(pid_file.read_text()), 5)

        pid_file.unlink()
        cancel = threading.Event()
        errors: list[BaseException] = []

        def work() -> None:
            try:
                validate(settings, env, sample=False, timeout_s=120, cancel=cancel)
            except BaseException as exc:
                errors.append(exc)

        worker = threading.Thread(target=work)
        worker.start()
        assert processes.wait_until(pid_file.exists, time.monotonic() + 60)
        cancel.set()
        worker.join(20)
        assert not worker.is_alive() and "cancelled" in str(errors[0])
        assert gone(int(pid_file.read_text()), 5)
    finally:
        del os.environ["PID_FILE"]


SERVER = """
import json, sys
from pathlib import Path
from mcp_rl.environments.discovery import EnvironmentInfo, parse_file
from mcp_rl.environments.validate import validate
from mcp_rl.settings import Settings

(env,) = parse_file(Path(sys.argv[1]))
env = env.model_copy(update={"env_vars": ["PID_FILE"]})
validate(Settings.from_env(), env, sample=False, timeout_s=600)
"""


def test_a_child_ends_with_its_killed_server_and_a_restart_ends_what_is_left(home: Path, tmp_path: Path) -> None:
    """kill -9 of the process that runs a validation (a stand-in for the server, running the same
    code): the looping child ends by itself; a record it left is cleared by `end_orphans`."""
    pid_file = tmp_path / "loop.pid"
    path = task_file(tmp_path / "envs", "orphan", LOOP)
    env = {**make_env(home), "PATH": os.environ.get("PATH", ""), "PID_FILE": str(pid_file)}
    server = subprocess.Popen([sys.executable, "-c", SERVER, str(path)], env=env, start_new_session=True)
    try:
        assert processes.wait_until(lambda: pid_file.exists() and pid_file.read_text(), time.monotonic() + 90), (
            "the child never started"
        )
        child = int(pid_file.read_text())
        settings = Settings.from_env(make_env(home))
        (record_path,) = children_dir(settings).glob("*.json")
        record = ChildRecord.model_validate_json(record_path.read_text())
        assert record.pid == child and record.owner_pid == server.pid
        assert end_orphans(settings) == [] and psutil.pid_exists(child)  # its server lives: left alone
        server.send_signal(signal.SIGKILL)
        server.wait(10)
        assert gone(child, 10), "the child kept spinning after its server was killed"
        # The record of the dead server's child is cleared by the next server.
        assert record_path.exists()
        end_orphans(settings)
        assert not record_path.exists()
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()


def test_a_restarted_server_ends_a_child_left_behind_by_its_marker(home: Path, tmp_path: Path) -> None:
    """A child whose lifeline failed (e.g. its own code holds the lifeline thread off) is found by its
    record and marker and ended; a process at a recorded pid without the marker is left alone."""
    settings = Settings.from_env(make_env(home))
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead_ident = processes.identify(dead.pid)
    dead.wait()
    assert dead_ident is not None
    marker = processes.new_marker("child")
    left = subprocess.Popen(["sleep", "300"], env={**os.environ, processes.MARKER_ENV: marker}, start_new_session=True)
    stranger = subprocess.Popen(["sleep", "300"], start_new_session=True)
    try:
        folder = children_dir(settings)
        folder.mkdir(parents=True)
        for proc, name in ((left, "left"), (stranger, "stranger")):
            ident = processes.identify(proc.pid)
            assert ident is not None
            record = ChildRecord(
                pid=proc.pid,
                pgid=ident.pgid,
                create_time=ident.create_time,
                marker=marker if proc is left else processes.new_marker("child"),
                owner_pid=dead.pid,
                owner_create_time=dead_ident.create_time,
                what=f"validating {name}",
                started_at=time.time(),
            )
            (folder / f"{name}.json").write_text(json.dumps(record.model_dump()))
        ended = end_orphans(settings)
        assert ended == [f"validating left (pid {left.pid})"], ended
        assert left.wait(10) is not None
        assert stranger.poll() is None, "a process without the marker was signalled"
        assert list(folder.glob("*.json")) == []
    finally:
        for proc in (left, stranger):
            if proc.poll() is None:
                proc.kill()
                proc.wait()


@pytest.mark.anyio
async def test_a_validation_past_the_budget_goes_on_and_is_cancelled_through_the_tool(
    home: Path, tmp_path: Path
) -> None:
    from mcp import Client

    from tests.conftest import stdio_params

    pid_file = tmp_path / "loop.pid"
    envs = tmp_path / "envs"
    task_file(envs, "spins", LOOP.replace('os.environ["PID_FILE"]', repr(str(pid_file))))
    params = stdio_params(home, MCP_RL_ENV_PATHS=str(envs), MCP_RL_TOOL_TIME_BUDGET="4")
    async with Client(params, mode="legacy", read_timeout_seconds=60) as client:
        args = {"name": "spins", "sample_base_model": False}
        began = time.monotonic()
        first = await client.call_tool("rl_validate_environment", args)
        assert time.monotonic() - began < 15
        assert not first.is_error and first.structured_content["status"] == "running", first.content
        assert processes.wait_until(pid_file.exists, time.monotonic() + 60)
        child = int(pid_file.read_text())
        assert psutil.pid_exists(child) and not _zombie(child)
        again = await client.call_tool("rl_validate_environment", args)  # joins, does not start a second
        assert again.structured_content["status"] == "running" and int(pid_file.read_text()) == child
        cancelled = await client.call_tool("rl_validate_environment", {**args, "cancel": True})
        assert cancelled.structured_content["status"] == "cancelled", cancelled.content
        assert gone(child, 5)
        nothing = await client.call_tool("rl_validate_environment", {**args, "cancel": True})
        assert "nothing to cancel" in nothing.structured_content["message"]


@pytest.mark.anyio
async def test_a_starting_server_ends_a_validation_child_its_killed_predecessor_left(home: Path) -> None:
    from mcp import Client

    from tests.conftest import stdio_params

    settings = Settings.from_env(make_env(home))
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead_ident = processes.identify(dead.pid)
    dead.wait()
    marker = processes.new_marker("child")
    left = subprocess.Popen(["sleep", "300"], env={**os.environ, processes.MARKER_ENV: marker}, start_new_session=True)
    try:
        ident = processes.identify(left.pid)
        assert ident is not None and dead_ident is not None
        children_dir(settings).mkdir(parents=True)
        record = ChildRecord(
            pid=left.pid,
            pgid=ident.pgid,
            create_time=ident.create_time,
            marker=marker,
            owner_pid=dead.pid,
            owner_create_time=dead_ident.create_time,
            what="validating spins",
            started_at=time.time(),
        )
        (children_dir(settings) / "left.json").write_text(record.model_dump_json())
        async with Client(stdio_params(home), mode="legacy", read_timeout_seconds=60) as client:
            await client.call_tool("rl_list_environments", {})

            async def ended() -> bool:
                return left.poll() is not None

            with contextlib.suppress(WaitTimeout):  # the assertion below says what was left
                await wait_for_async(ended, 30, "the predecessor's child to end")
        assert left.poll() is not None, "the new server left its predecessor's validation child running"
        assert list(children_dir(settings).glob("*.json")) == []
    finally:
        if left.poll() is None:
            left.kill()
            left.wait()
