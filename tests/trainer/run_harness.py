"""Start a real local training run (run-api + trainer + environment) for tests and the bench.

The processes are the real ones the supervisor starts: `run-api` from the venv, `python -m
mcp_rl.trainer --config run.yaml` and `python <env file> serve --config run.yaml`. Each runs in
its own session with stdin closed and output in a log file; every wait is a probe with a deadline.
The run.yaml is built here in the shape the lead's `build_run_config` renders.
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

from mcp_rl.runconfig import EnvironmentRef, RunConfig, RunPaths, TrainerSettings
from mcp_rl.settings import bundled_environments_dir
from tests.kit.wait import wait_for

ARITHMETIC = bundled_environments_dir() / "arithmetic.py"


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


def arithmetic_run_config(
    run_dir: Path,
    model_dir: Path,
    *,
    num_steps: int = 3,
    batch_size: int = 8,
    group_size: int = 4,
    learning_rate: float = 2e-4,
    lora_rank: int = 8,
    max_new_tokens: int = 8,
    save_checkpoint_interval: int = 0,
    max_batches_offpolicy: int = 1,
    max_num_workers: int = 4,
    batch_wait_timeout_s: float = 300.0,
    api_unreachable_timeout_s: float = 20.0,
    resume: bool = True,
    run_id: str = "test",
    env_overrides: dict[str, Any] | None = None,
) -> RunConfig:
    model = str(model_dir)
    env: dict[str, Any] = {
        "tokenizer_name": model,
        "use_wandb": False,
        "wandb_name": f"arithmetic-{run_id}",
        "total_steps": num_steps,
        "batch_size": batch_size,
        "group_size": group_size,
        "max_token_length": 512,
        "max_num_workers": max_num_workers,
        "worker_timeout": 600,
        "steps_per_eval": 1000000,
        "max_batches_offpolicy": max_batches_offpolicy,
        "inference_weight": 1.0,
        "eval_limit_ratio": 0.1,
        "max_new_tokens": max_new_tokens,
    }
    env.update(env_overrides or {})
    config = RunConfig(
        run_id=run_id,
        environment=EnvironmentRef(
            name="arithmetic", class_name="ArithmeticEnv", file_path=ARITHMETIC, project_root=ARITHMETIC.parent
        ),
        paths=RunPaths.for_run(run_dir),
        env=env,
        openai=[
            {
                "model_name": model,
                "tokenizer_name": model,
                "base_url": "http://127.0.0.1:1/v1",
                "api_key": "x",
                "server_type": "sglang",
                "health_check": False,
                "timeout": 600,
                "num_requests_for_eval": 16,
            }
        ],
        trainer=TrainerSettings(
            backend="local",
            base_model=model,
            num_steps=num_steps,
            batch_size=batch_size,
            group_size=group_size,
            lora_rank=lora_rank,
            learning_rate=learning_rate,
            max_token_trainer_length=512,
            save_checkpoint_interval=save_checkpoint_interval,
            batch_wait_timeout_s=batch_wait_timeout_s,
            api_unreachable_timeout_s=api_unreachable_timeout_s,
            resume=resume,
        ),
    )
    return config.with_ports(api=free_port(), inference=free_port())


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
