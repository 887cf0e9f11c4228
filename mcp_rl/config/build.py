"""Rendering run.yaml: the exact `RunConfig` a run's three processes get, from the session, the
environment's config and the locked fields, and where a local-backend model lives.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from mcp_rl.config.checks import check_base_model, check_group_vs_batch, clean_edits
from mcp_rl.config.options import DERIVED, effective_backend, locked_fields, resolve_run_options
from mcp_rl.config.session import Session
from mcp_rl.environments.introspect import ConfigSpec
from mcp_rl.errors import NotSelected, UserError
from mcp_rl.runconfig import RunConfig, RunPaths, TrainerSettings, WandbSettings
from mcp_rl.settings import Settings


def local_model_location(settings: Settings, base_model: str) -> Path:
    """Where a local-backend model lives (the default one is converted there before training)."""
    from mcp_rl.models import DEFAULT_MODEL, default_model_dir  # paths only; no torch

    if base_model == DEFAULT_MODEL:
        return settings.model_path or default_model_dir(settings)
    return Path(base_model).expanduser().resolve()


def build_run_config(settings: Settings, session: Session, spec: ConfigSpec, run_id: str) -> RunConfig:
    """The exact config a run's three processes get (ports are filled in by the supervisor)."""
    if session.environment is None:
        raise NotSelected("No environment selected. Call rl_select_environment(name) first.")
    options, _ = resolve_run_options(settings, session.run_options, session.environment)
    backend = effective_backend(settings, options.backend)
    if backend == "tinker" and settings.tinker_api_key is None:
        raise UserError(
            "backend is 'tinker' but TINKER_API_KEY is not set. Set the key, or rl_edit_config('backend', 'local')."
        )
    if backend == "local" and importlib.util.find_spec("torch") is None:
        raise UserError("The local backend needs torch: pip install 'mcp-rl[local]' (CPU build: torch==2.13.0).")
    check_base_model(settings, options)
    edits, _ = clean_edits(spec, session.edits)
    env_values = {**spec.initial_values, **edits}
    group_size = env_values.get("group_size")
    check_group_vs_batch(group_size, options.batch_size)
    if isinstance(group_size, int) and group_size > options.batch_size:
        raise UserError(f"group_size ({group_size}) is larger than batch_size ({options.batch_size}).")

    model_ref = str(local_model_location(settings, options.base_model)) if backend == "local" else options.base_model
    # On Tinker the model is a hub id; MCP_RL_TOKENIZER_PATH names a local copy of its tokenizer,
    # which the environment then loads too (else it fetches it from the hub, as the trainer does).
    tokenizer_ref = str(settings.tokenizer_path) if backend == "tinker" and settings.tokenizer_path else model_ref
    locked = locked_fields(backend)
    derived_env = {
        "tokenizer_name": tokenizer_ref,
        "rollout_server_url": None,  # set by RunConfig.with_ports when the supervisor picks ports
        "use_wandb": settings.wandb_enabled,
        "wandb_name": f"{session.environment.name}-{run_id}",
        "total_steps": options.total_steps,
        "batch_size": options.batch_size,
        "data_path_to_save_groups": None,
    }
    for name, value in locked.env.items():
        env_values[name] = derived_env[name] if value == DERIVED else value
    known = {f.name for f in spec.fields}
    env_section = {k: v for k, v in env_values.items() if k in known}
    derived_openai = {"model_name": model_ref, "base_url": None}
    server = {name: derived_openai[name] if value == DERIVED else value for name, value in locked.openai.items()}
    server["tokenizer_name"] = tokenizer_ref
    run_dir = settings.runs_dir / run_id
    return RunConfig(
        run_id=run_id,
        environment=session.environment,
        paths=RunPaths.for_run(run_dir),
        env=env_section,
        openai=[server],
        trainer=TrainerSettings(
            backend=backend,
            base_model=model_ref,
            tokenizer_path=model_ref
            if backend == "local"
            else (str(settings.tokenizer_path) if settings.tokenizer_path else None),
            num_steps=options.total_steps,
            batch_size=options.batch_size,
            group_size=int(group_size) if isinstance(group_size, int) else 2,
            lora_rank=options.lora_rank,
            learning_rate=options.learning_rate,
            adam_beta1=options.adam_beta1,
            adam_beta2=options.adam_beta2,
            max_token_trainer_length=options.max_token_trainer_length,
            save_checkpoint_interval=options.save_checkpoint_interval,
            eval_every=options.eval_every,
            held_out_limit=options.held_out_limit,
            eval_metric=options.eval_metric,
            keep_last_checkpoints=options.keep_last_checkpoints,
            max_cost_usd=options.max_cost_usd,
            advantage_normalization=options.advantage_normalization,
            tinker_base_url=options.tinker_base_url,
            tinker_sdk=options.tinker_sdk,
            wandb=WandbSettings(
                enabled=settings.wandb_enabled,
                project=options.wandb_project,
                entity=settings.wandb_entity,
                group=run_id,
            ),
        ),
    )
