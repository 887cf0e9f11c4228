"""Runs for tests: the one builder of a run's config, folder and registry row (issue 38, 46).

`run_config` makes any run's config (by default a stand-in run whose environment is never
started) and, with `dump=True`, its folder with run.yaml; `arithmetic_run_config` is the real
arithmetic run the local-run, Tinker and bench tests train, in the shape `build_run_config` renders.
`run_record` is a run's registry row (`register` records one); `write_run` a synthetic finished
run in the run folder's formats (any length, any damage, in milliseconds); `write_run_file`,
`record_checkpoint` and `write_local_checkpoint_run` a run with real saved checkpoints, without
training.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

from mcp_rl.ports import allocate_ports
from mcp_rl.runconfig import EnvironmentRef, RunConfig, RunPaths, TrainerSettings, WandbSettings
from mcp_rl.rundir import CheckpointRecord, TrainerPhase, TrainerStatus
from mcp_rl.settings import Settings, bundled_environments_dir
from mcp_rl.supervisor.registry import Registry, RunRecord
from mcp_rl.supervisor.states import RunState

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


# --- registry rows --------------------


def run_record(
    run_id: str,
    run_dir: Path,
    *,
    environment: str = "arithmetic",
    state: RunState = RunState.STARTING,
    created_at: float | None = None,
    **extra: Any,
) -> RunRecord:
    """A local-backend run of `environment` in `run_dir` (its run.yaml beside), created now."""
    now = time.time()
    return RunRecord(
        run_id=run_id,
        environment=environment,
        backend="local",
        state=state,
        created_at=now if created_at is None else created_at,
        updated_at=now,
        run_dir=str(run_dir),
        config_path=str(Path(run_dir) / "run.yaml"),
        **extra,
    )


# --- synthetic run folders (metrics, status, weights) --------------------


def reward_at(step: int, steps: int) -> float:
    """A rising, noisy-looking but deterministic reward curve with one dip at steps//3."""
    value = step / steps + 0.05 * math.sin(step)
    return value - 0.5 if step == steps // 3 else value


def loss_at(step: int) -> float:
    return 1.0 / step


def write_run(
    settings: Settings,
    run_id: str,
    steps: int,
    *,
    state: str | None = "completed",
    wandb_enabled: bool = False,
    with_weights: bool = True,
    env_metrics: bool = False,
) -> Path:
    run_dir = settings.runs_dir / run_id
    config = run_config(
        run_dir,
        run_id=run_id,
        env={"group_size": 4, "batch_size": 8, "total_steps": steps},
        openai=[{"model_name": "m", "base_url": "http://127.0.0.1:1/v1", "api_key": "x"}],
        base_model="/nowhere/model",
        num_steps=steps,
        batch_size=8,
        group_size=4,
        wandb=WandbSettings(enabled=wandb_enabled, project="mcp-rl", group=run_id),
        dump=True,
    )
    paths = config.paths
    now = time.time()
    with open(paths.metrics, "w", encoding="utf-8") as fh:
        for step in range(1, steps + 1):
            row = {
                "step": step,
                "time": now + step,
                "train/loss": loss_at(step),
                "reward/mean": reward_at(step, steps),
                "advantages/mean": 0.0,
                "tokens": 100,
                "time/step_seconds": 1.0,
            }
            fh.write(json.dumps(row) + "\n")
    if env_metrics:
        with open(run_dir / "env_metrics.jsonl", "w", encoding="utf-8") as fh:
            for step in range(1, steps + 1):
                fh.write(json.dumps({"step": step, "time": now, "train/percent_correct": step / (2 * steps)}) + "\n")
            fh.write(json.dumps({"step": steps, "time": now, "eval/percent_correct": 0.75}) + "\n")
    weights = paths.checkpoints_dir / f"step_{steps}"
    if with_weights:
        weights.mkdir(parents=True)
        (weights / "adapter_config.json").write_text("{}")
        with open(paths.checkpoints_index, "w", encoding="utf-8") as fh:
            fh.write(
                CheckpointRecord(step=steps, kind="sampler", path=str(weights), time=now, final=True).model_dump_json()
                + "\n"
            )
    status = TrainerStatus(
        phase=TrainerPhase.DONE if state == "completed" else TrainerPhase.TRAINING,
        step=steps,
        num_steps=steps,
        heartbeat=now,
        pid=1,
        final_weights=str(weights) if with_weights else None,
    )
    paths.trainer_status.write_text(status.model_dump_json())
    if state is not None:
        register(settings, run_id, run_dir, state)
    return run_dir


def register(settings: Settings, run_id: str, run_dir: Path, state: str) -> None:
    """A registry row for the run, as the supervisor records it."""
    Registry(settings.state_db).create_run(run_record(run_id, run_dir, environment="toy", state=RunState(state)))


# --- run folders with real saved checkpoints, without training --------------------


def write_run_file(
    settings: Settings,
    run_id: str,
    *,
    base_model: str,
    backend: str = "local",
    steps: int = 4,
    tokenizer_path: str | None = None,
    tinker_base_url: str | None = None,
    held_out_limit: int | None = None,
) -> RunConfig:
    return run_config(
        settings.runs_dir / run_id,
        run_id=run_id,
        environment=ARITHMETIC_ENV,
        env={"group_size": 4, "batch_size": 8, "total_steps": steps},
        openai=[{"model_name": base_model, "base_url": "http://127.0.0.1:1/v1", "api_key": "x"}],
        backend=backend,
        base_model=base_model,
        tokenizer_path=tokenizer_path,
        tinker_base_url=tinker_base_url,
        held_out_limit=held_out_limit,
        num_steps=steps,
        batch_size=8,
        group_size=4,
        dump=True,
    )


def record_checkpoint(config: RunConfig, step: int, kind: str, path: str, final: bool = False) -> None:
    record = CheckpointRecord(step=step, kind=kind, path=path, time=time.time(), final=final)  # type: ignore[arg-type]
    with open(config.paths.checkpoints_index, "a", encoding="utf-8") as fh:
        fh.write(record.model_dump_json() + "\n")


def make_adapter(model_dir: Path, target: Path, seed: int = 0, scale: float = 0.02) -> Any:
    """Save a rank-2 LoRA adapter of the real model at `target`; returns the PEFT model (unmerged)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    base = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    model = get_peft_model(
        base,
        LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj", "v_proj"], lora_dropout=0.0, task_type="CAUSAL_LM"),
    )
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(0.0, scale)
    model.eval()
    target.parent.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(target))
    return model


def write_local_checkpoint_run(
    settings: Settings,
    run_id: str,
    model_dir: Path,
    steps: tuple[int, ...] = (2,),
    held_out_limit: int | None = None,
) -> tuple[RunConfig, Any]:
    """A local run with an adapter saved at each of `steps` (the last marked final); returns the
    run file and the PEFT model of the last step."""
    config = write_run_file(
        settings, run_id, base_model=str(model_dir), steps=max(steps), held_out_limit=held_out_limit
    )
    model = None
    for i, step in enumerate(steps):
        folder = config.paths.checkpoints_dir / f"step_{step:06d}"
        model = make_adapter(model_dir, folder / "adapter", seed=step)
        final = i == len(steps) - 1
        record_checkpoint(config, step, "state", str(folder), final=final)
        record_checkpoint(config, step, "sampler", str(folder / "adapter"), final=final)
    return config, model


def json_line(text: str) -> dict[str, Any]:
    """The last JSON object line of a command's output."""
    for line in reversed(text.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise AssertionError(f"no JSON line in {text!r}")
