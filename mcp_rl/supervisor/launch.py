"""The three processes of a run, as commands and readiness probes built from its run.yaml."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from mcp_rl.config.options import checked_tinker_url
from mcp_rl.environments.discovery import declared_env_vars
from mcp_rl.environments.mcp_family.taskfile import keys_needed
from mcp_rl.ports import HOST
from mcp_rl.runconfig import RunConfig
from mcp_rl.rundir import JUDGE_SPEND_FILE
from mcp_rl.settings import Settings
from mcp_rl.supervisor import readiness, tinker_sdk
from mcp_rl.supervisor.supervisor import Policy, ProcessSpec


def log_path(config: RunConfig, name: str) -> Path:
    return config.paths.logs_dir / f"{name}.log"


def _tinker_env(config: RunConfig, settings: Settings, env: dict[str, str]) -> dict[str, str]:
    """The trainer's environment on Tinker: the run's server, and the SDK that server speaks first
    on its path (installed on first use: tinker_sdk)."""
    t = config.trainer
    if t.tinker_base_url:
        # Checked again where the key leaves: run.yaml may be older than the user's current list.
        checked_tinker_url(t.tinker_base_url, settings.allowed_tinker_hosts)
    base_url = t.tinker_base_url or settings.tinker_base_url
    key = settings.tinker_api_key.get_secret_value() if settings.tinker_api_key else None
    dialect = tinker_sdk.resolve(t.tinker_sdk, base_url, key)
    extra: dict[str, str] = {}
    if t.tinker_base_url:
        extra["TINKER_BASE_URL"] = t.tinker_base_url
    path = tinker_sdk.sdk_path(dialect, settings.home / "tinker-sdk")
    if path is not None:
        extra["PYTHONPATH"] = os.pathsep.join(p for p in (str(path), env.get("PYTHONPATH", "")) if p)
    return {**env, **extra}


def build_specs(config: RunConfig, config_path: Path, settings: Settings, policy: Policy) -> list[ProcessSpec]:
    """API, trainer, environment: in start order. `config` must already carry its ports."""
    api_port, inference_port = config.ports.api, config.ports.inference
    if api_port is None or inference_port is None:
        raise ValueError("run config has no ports; call RunConfig.with_ports first")
    run_dir = config.paths.run_dir
    # W&B (offline mode too) writes its files under the run, never into the environment's project.
    env = settings.child_env(WANDB_DIR=str(run_dir))
    trainer_env = _tinker_env(config, settings, env) if config.trainer.backend == "tinker" else env
    # The environment runs the user's code: the allow-list and the variables it names, no key of
    # ours but W&B's when the run logs to W&B (Atropos logs the environment's rollouts from there).
    named = declared_env_vars(config.environment.file_path, config.environment.class_name, config.env)
    if config.trainer.wandb.enabled:
        named.append("WANDB_API_KEY")
    # An MCP task with a paid judge calls OpenRouter from the environment process (never from the
    # MCP server it runs: mcp_family/server.py keeps every key of ours out of that one).
    named += keys_needed(config.env.get("task_file"))
    env_env = settings.user_code_env(
        named, WANDB_DIR=str(run_dir), MCP_RL_JUDGE_SPEND_FILE=str(run_dir / JUDGE_SPEND_FILE)
    )
    # run-api is Atropos's own server: it needs no key either.
    api_env = settings.user_code_env(WANDB_DIR=str(run_dir))
    python = sys.executable
    release_file = run_dir / ".env-start"
    release_file.unlink(missing_ok=True)
    return [
        ProcessSpec(
            name="api",
            # `run-api` itself, through the interpreter so PATH does not matter; bound to loopback.
            argv=[python, "-m", "atroposlib.cli.run_api", "--host", HOST, "--port", str(api_port)],
            log_path=log_path(config, "api"),
            env=api_env,
            cwd=run_dir,
            port=api_port,
            ready=readiness.api_up(api_port),
            ready_deadline_s=policy.api_ready_s,
            ready_description=f"GET http://{HOST}:{api_port}/status",
        ),
        ProcessSpec(
            name="trainer",
            argv=[python, "-m", "mcp_rl.trainer", "--config", str(config_path)],
            log_path=log_path(config, "trainer"),
            env=trainer_env,
            cwd=run_dir,
            port=inference_port,
            # Loading torch and the model (most of a run's start-up) overlaps the API's start;
            # the trainer registers with the API only after that, retrying until it answers.
            prestart=True,
            ready=readiness.trainer_serving(inference_port),
            ready_deadline_s=policy.trainer_ready_s,
            ready_description=f"GET http://{HOST}:{inference_port}/health",
        ),
        ProcessSpec(
            name="env",
            argv=[
                python,
                "-m",
                "mcp_rl.environments.runner",
                str(config.environment.file_path),
                config.environment.class_name,
                "--project-root",
                str(config.environment.project_root),
                "--start-when",
                str(release_file),
                "serve",
                "--config",
                str(config_path),
            ],
            log_path=log_path(config, "env"),
            env=env_env,
            cwd=config.environment.project_root,
            # Its imports (atroposlib, the tokenizer: seconds) overlap the others' start-up;
            # `serve` begins when the trainer is ready and the supervisor creates the file.
            prestart=True,
            release=release_file.touch,
            ready=readiness.env_registered(api_port),
            ready_deadline_s=policy.env_ready_s,
            ready_description=f"registered with the API (GET http://{HOST}:{api_port}/status-env)",
        ),
    ]
