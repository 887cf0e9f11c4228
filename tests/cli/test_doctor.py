"""`mcp-rl doctor`: each check finds a real problem, says what to do, and never shows a key."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

from mcp_rl.doctor import Status, check_ports, run_checks
from tests.conftest import REPO, make_env
from tests.fakes.key_checks import FakeServices

GOOD = "sk-good-7d1e0c55"
BAD = "sk-bad-19aa7f02"


def by_name(report) -> dict:
    return {c.name: c for c in report.checks}


def a_model_folder(tmp_path: Path) -> Path:
    """What the doctor checks of a model folder (config.json), without converting the real one."""
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    return folder


def test_clean_machine_is_ready_offline(home: Path, tmp_path: Path) -> None:
    checks = by_name(run_checks(make_env(home, MCP_RL_MODEL=str(a_model_folder(tmp_path))), offline=True))
    assert checks["python"].status == Status.OK
    assert checks["packages (core)"].status == Status.OK and "mcp 2.3.0" in checks["packages (core)"].detail
    assert checks["default model"].status == Status.OK
    assert checks["state directory"].status == Status.OK and str(home) in checks["state directory"].detail
    assert {checks[n].status for n in ("tinker", "wandb", "openrouter")} == {Status.SKIP}
    assert "TINKER_API_KEY not set" in checks["keys"].detail


def test_remote_services_good_keys(home: Path) -> None:
    with FakeServices(GOOD) as fake:
        env = make_env(
            home,
            TINKER_API_KEY=GOOD,
            WANDB_API_KEY=GOOD,
            OPENROUTER_API_KEY=GOOD,
            TINKER_BASE_URL=f"{fake.base_url}/tinker",
            WANDB_BASE_URL=f"{fake.base_url}/wandb",
            OPENROUTER_BASE_URL=f"{fake.base_url}/openrouter",
        )
        report = run_checks(env)
    checks = by_name(report)
    assert checks["tinker"].status == Status.OK
    assert checks["wandb"].status == Status.OK and "tester" in checks["wandb"].detail
    assert checks["openrouter"].status == Status.OK
    assert "TINKER_API_KEY set" in checks["keys"].detail
    assert GOOD not in report.model_dump_json()
    assert {p for _, p in fake.requests} == {"/tinker/api/v1/auth/apikey/me", "/wandb/graphql", "/openrouter/key"}


def test_remote_services_bad_keys_say_what_to_do(home: Path) -> None:
    with FakeServices(GOOD) as fake:
        env = make_env(
            home,
            TINKER_API_KEY=BAD,
            WANDB_API_KEY=BAD,
            OPENROUTER_API_KEY=BAD,
            TINKER_BASE_URL=f"{fake.base_url}/tinker",
            WANDB_BASE_URL=f"{fake.base_url}/wandb",
            OPENROUTER_BASE_URL=f"{fake.base_url}/openrouter",
        )
        report = run_checks(env)
    checks = by_name(report)
    assert report.failed
    for name, var in (("tinker", "TINKER_API_KEY"), ("wandb", "WANDB_API_KEY"), ("openrouter", "OPENROUTER_API_KEY")):
        assert checks[name].status == Status.FAIL
        assert var in checks[name].detail and checks[name].fix
    assert BAD not in report.model_dump_json()


def test_unreachable_service(home: Path) -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = make_env(home, OPENROUTER_API_KEY=GOOD, OPENROUTER_BASE_URL=f"http://127.0.0.1:{port}/api/v1")
    check = by_name(run_checks(env))["openrouter"]
    assert check.status == Status.FAIL and "cannot reach" in check.detail and check.fix


def test_unwritable_state_dir_and_broken_model(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    empty_model = tmp_path / "model"
    empty_model.mkdir()
    env = make_env(blocker / "home", MCP_RL_MODEL=str(empty_model))
    checks = by_name(run_checks(env, offline=True))
    assert checks["state directory"].status == Status.FAIL and "MCP_RL_HOME" in checks["state directory"].fix
    assert checks["default model"].status == Status.FAIL and "config.json" in checks["default model"].detail


def test_busy_http_port_is_a_warning() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        check = check_ports(sock.getsockname()[1])
    assert check.status == Status.WARN and "--port" in check.fix


def test_cli_exit_code_and_no_secret_in_output(home: Path, tmp_path: Path) -> None:
    env = make_env(
        home,
        TINKER_API_KEY="sk-secret-never-shown",
        MCP_RL_TOKEN="tok-never-shown",
        MCP_RL_MODEL=str(a_model_folder(tmp_path)),
    )
    env["PATH"] = os.environ.get("PATH", "")
    done = subprocess.run(
        [sys.executable, "-m", "mcp_rl", "doctor", "--offline"],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "never-shown" not in done.stdout + done.stderr
    assert "TINKER_API_KEY set" in done.stdout and "MCP_RL_TOKEN set" in done.stdout

    env["MCP_RL_MODEL"] = str(home)  # not a model folder: a failure, exit 1
    done = subprocess.run(
        [sys.executable, "-m", "mcp_rl", "doctor", "--offline", "--json"],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1
    checks = {c["name"]: c for c in json.loads(done.stdout)["checks"]}
    assert checks["default model"]["status"] == "fail"
