"""Run folders for tests: the one builder of a run's RunConfig (issue 38).

`run_config` makes any run's config (by default a stand-in run whose environment is never
started) and, with `dump=True`, its folder with run.yaml; `arithmetic_run_config` is the real
arithmetic run the local-run, Tinker and bench tests train, in the shape `build_run_config` renders.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mcp_rl.ports import allocate_ports
from mcp_rl.runconfig import EnvironmentRef, RunConfig, RunPaths, TrainerSettings
from mcp_rl.settings import bundled_environments_dir

ARITHMETIC = bundled_environments_dir() / "arithmetic.py"
ARITHMETIC_ENV = EnvironmentRef(
    name="arithmetic", class_name="ArithmeticEnv", file_path=ARITHMETIC, project_root=ARITHMETIC.parent
)
# Held-out items a test run evaluates (the run option held_out_limit; users' default: all, 201 for
# arithmetic): enough to show the wiring (per-item outcomes, the paired figures, the same items at
# both ends), a tenth of the cost. Learning claims, which need every item, live in bench/.
TEST_HELD_OUT_LIMIT = 20
# An environment no test starts: the run folder is only read.
TOY_ENV = EnvironmentRef(
    name="toy", class_name="ToyEnv", file_path=Path("/nowhere/toy.py"), project_root=Path("/nowhere")
)


def run_config(
    run_dir: Path,
    *,
    run_id: str = "t",
    environment: EnvironmentRef = TOY_ENV,
    env: dict[str, Any] | None = None,
    openai: list[dict[str, Any]] | None = None,
    dump: bool = False,
    **trainer: Any,
) -> RunConfig:
    """A run's config in `run_dir`; `trainer` are TrainerSettings fields (a one-step local run of
    model "m" unless given). `dump` writes run.yaml, with the logs folder beside it."""
    settings = {"base_model": "m", "num_steps": 1, "batch_size": 2, "group_size": 2, **trainer}
    config = RunConfig(
        run_id=run_id,
        environment=environment,
        paths=RunPaths.for_run(run_dir),
        env=env or {},
        openai=openai or [],
        trainer=TrainerSettings(**settings),
    )
    if dump:
        config.paths.logs_dir.mkdir(parents=True, exist_ok=True)
        config.dump(run_dir / "run.yaml")
    return config


def arithmetic_run_config(
    run_dir: Path,
    model_dir: Path,
    *,
    num_steps: int = 3,
    batch_size: int = 8,
    group_size: int = 4,
    max_new_tokens: int = 8,
    max_batches_offpolicy: int = 1,
    max_num_workers: int = 4,
    run_id: str = "test",
    env_overrides: dict[str, Any] | None = None,
    **trainer: Any,
) -> RunConfig:
    """A real arithmetic run of the model in `model_dir` on fresh ports; `trainer` overrides the
    TrainerSettings below (e.g. backend="tinker", max_cost_usd=...)."""
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
    server = {"model_name": model, "tokenizer_name": model, "base_url": "http://127.0.0.1:1/v1", "api_key": "x"}
    server |= {"server_type": "sglang", "health_check": False, "timeout": 600, "num_requests_for_eval": 16}
    settings: dict[str, Any] = {
        "backend": "local",
        "base_model": model,
        "learning_rate": 2e-4,
        "max_token_trainer_length": 512,
        "batch_wait_timeout_s": 300.0,
        "api_unreachable_timeout_s": 20.0,
        **trainer,
    }
    config = run_config(
        run_dir,
        run_id=run_id,
        environment=ARITHMETIC_ENV,
        env=env,
        openai=[server],
        num_steps=num_steps,
        batch_size=batch_size,
        group_size=group_size,
        **settings,
    )
    api, inference = allocate_ports(2)
    return config.with_ports(api=api, inference=inference)
