"""Start a real local training run (run-api + trainer + environment) for tests and the bench.

The processes are the real ones the supervisor starts: `run-api` from the venv, `python -m
mcp_rl.trainer --config run.yaml` and `python <env file> serve --config run.yaml`. Each runs in
its own session with stdin closed and output in a log file; every wait is a probe with a deadline.
The run.yaml comes from tests/kit/runs.py.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from mcp_rl.runconfig import RunConfig
from tests.kit.wait import wait_for


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def venv_bin(name: str) -> str:
    """A console script installed next to this interpreter (e.g. run-api)."""
    path = Path(sys.executable).parent / name
    if not path.exists():
        raise FileNotFoundError(f"{name} not found next to {sys.executable}")
    return str(path)


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    def alive(self) -> bool:
        return self.popen.poll() is None

    def tail(self, n: int = 40) -> str:
        try:
            return "\n".join(self.log.read_text(encoding="utf-8", errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def signal_group(self, sig: int) -> None:
        try:
            os.killpg(self.popen.pid, sig)
        except ProcessLookupError:
            pass

    def stop(self, grace_s: float = 10.0) -> None:
        if not self.alive():
            return
        self.signal_group(signal.SIGTERM)
        try:
            self.popen.wait(grace_s)
        except subprocess.TimeoutExpired:
            self.signal_group(signal.SIGKILL)
            self.popen.wait(10)


def child_env(home: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "MCP_RL_HOME": str(home),
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "TOKENIZERS_PARALLELISM": "false",
            "WANDB_MODE": "disabled",
            "PYTHONUNBUFFERED": "1",
        }
    )
    return env


def start(name: str, argv: list[str], log: Path, env: dict[str, str], cwd: Path) -> Proc:
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as fh:
        popen = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=fh,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=str(cwd),
            start_new_session=True,
        )
    return Proc(name, popen, log)


def http_ok(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2.0).status_code == 200
    except httpx.HTTPError:
        return False


@dataclass
class LocalRun:
    """The three processes of one run; use as a context manager (everything stopped on exit)."""

    config: RunConfig
    home: Path
    procs: dict[str, Proc] = field(default_factory=dict)

    @property
    def run_yaml(self) -> Path:
        return self.config.paths.run_dir / "run.yaml"

    def __enter__(self) -> LocalRun:
        self.config.dump(self.run_yaml)
        return self

    def __exit__(self, *exc: object) -> None:
        for name in ("env", "trainer", "api"):
            if name in self.procs:
                self.procs[name].stop()

    def log(self, name: str) -> Path:
        return self.config.paths.logs_dir / f"{name}.log"

    def start_api(self) -> Proc:
        env = child_env(self.home)
        proc = start(
            "api",
            [venv_bin("run-api"), "--host", "127.0.0.1", "--port", str(self.config.ports.api)],
            self.log("api"),
            env,
            self.config.paths.run_dir,
        )
        self.procs["api"] = proc
        wait_for(
            lambda: http_ok(f"http://127.0.0.1:{self.config.ports.api}/status"), 60, "run-api /status", watch=[proc]
        )
        return proc

    def start_trainer(self) -> Proc:
        proc = start(
            "trainer",
            [sys.executable, "-m", "mcp_rl.trainer", "--config", str(self.run_yaml)],
            self.log("trainer"),
            child_env(self.home),
            self.config.paths.run_dir,
        )
        self.procs["trainer"] = proc
        wait_for(
            lambda: http_ok(f"http://127.0.0.1:{self.config.ports.inference}/health"),
            180,
            "trainer inference /health",
            watch=[proc],
        )
        return proc

    def start_env(self) -> Proc:
        # The config's environment, through the runner the supervisor uses (not always arithmetic:
        # the own-task bench trains a task file).
        env = self.config.environment
        argv = [sys.executable, "-m", "mcp_rl.environments.runner", str(env.file_path), env.class_name]
        argv += ["--project-root", str(env.project_root), "serve", "--config", str(self.run_yaml)]
        proc = start("env", argv, self.log("env"), child_env(self.home), self.config.paths.run_dir)
        self.procs["env"] = proc
        return proc

    def start_all(self) -> None:
        self.start_api()
        self.start_trainer()
        self.start_env()

    def wait_trainer_exit(self, timeout_s: float) -> int:
        trainer = self.procs["trainer"]
        try:
            return trainer.popen.wait(timeout_s)
        except subprocess.TimeoutExpired as exc:
            raise AssertionError(f"trainer still running after {timeout_s:.0f} s:\n{trainer.tail()}") from exc

    def metrics(self) -> list[dict[str, Any]]:
        path = self.config.paths.metrics
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]

    def status(self) -> dict[str, Any]:
        try:
            return dict(json.loads(self.config.paths.trainer_status.read_text(encoding="utf-8")))
        except (OSError, ValueError):
            return {}

    def checkpoints(self) -> list[dict[str, Any]]:
        path = self.config.paths.checkpoints_index
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
