"""Run options and locked fields: the run-level settings an agent may edit (backend, model,
steps, batch size, LoRA rank, learning rate, ...) with their per-backend defaults from
`configs/run_options.yaml`, and the infrastructure fields `configs/locked.yaml` fixes.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator

from mcp_rl.errors import UserError, clip
from mcp_rl.runconfig import EnvironmentRef
from mcp_rl.settings import Settings, configs_dir
from mcp_rl.urls import (
    HOSTED_TINKER_HOST,
    AllowedHost,
    ServiceUrl,
    canonical_url,
    checked_service_url,
    is_hosted_tinker,
)

DERIVED = "derived"
BackendChoice = Literal["auto", "local", "tinker"]


class RunOptions(BaseModel):
    """Run-level settings the agent may edit; defaults depend on the backend."""

    # NaN and infinity are bad input like any other invalid number (JSON cannot even store them).
    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)

    backend: BackendChoice = Field("auto", description="auto: tinker when TINKER_API_KEY is set, else local.")
    base_model: str = Field(
        description='local: "default" (embedded SmolLM2-135M-Instruct) or a local Hugging Face model folder; '
        "tinker: a Tinker model name such as Qwen/Qwen3-8B."
    )
    total_steps: int = Field(ge=1, le=1_000_000, description="Training steps (batches) in the run.")
    batch_size: int = Field(ge=1, le=65_536, description="Sequences per step; a multiple of group_size.")
    lora_rank: int = Field(ge=1, le=512, description="LoRA rank.")
    learning_rate: float = Field(gt=0, le=1, description="Adam learning rate.")
    adam_beta1: float = Field(ge=0, lt=1, description="Adam beta1.")
    adam_beta2: float = Field(ge=0, lt=1, description="Adam beta2.")
    max_token_trainer_length: int = Field(ge=16, le=1_000_000, description="Longest sequence the trainer takes.")
    save_checkpoint_interval: int = Field(
        ge=0, description="Save a resumable checkpoint every N steps (0: final only)."
    )
    wandb_project: str = Field(min_length=1, description="W&B project (used when W&B is configured).")
    eval_every: int = Field(
        0,
        ge=0,
        le=1_000_000,
        description="Evaluate on the held-out items every N steps, besides before the first step and after the "
        "last (0: only those two).",
    )
    held_out_limit: int | None = Field(
        None,
        ge=1,
        le=1_000_000,
        description="Evaluate on the first N held-out items only (the same N every evaluation, and in "
        "rl_evaluate_checkpoint of this run): faster, with a wider interval. None: all of them (arithmetic 201). "
        "Environments evaluated by their own evaluate() keep their own split.",
    )
    eval_metric: str | None = Field(
        None,
        pattern=r"^[A-Za-z0-9_./@:+-]{1,200}$",
        description="An environment whose own evaluate() reports several metrics: the one that stands for it (as "
        "the environment names it, e.g. eval/accuracy). None: per-item samples when it gives them, else the first of "
        "eval/percent_correct, *percent_correct, accuracy, acc, *accuracy*, *acc*, *correct*, *pass*, *success*, "
        "*score*, *reward* with a value in [0, 1] (eval-named first).",
    )
    keep_last_checkpoints: int = Field(
        3,
        ge=0,
        le=10_000,
        description="Local checkpoints kept besides the final and the kept ones (0: keep every one).",
    )
    max_cost_usd: float | None = Field(
        None,
        gt=0,
        le=1_000_000,
        description="Paid backends: end the run (stopped, checkpoint kept) before a step would pass this estimated "
        "USD spend. None: no cap.",
    )
    start_from: str | None = Field(
        None,
        pattern=r"^[A-Za-z0-9_-]{1,64}(@[0-9]{1,9})?$",
        description="RUN_ID or RUN_ID@STEP: start from that earlier run's checkpoint (its newest, or STEP's; same "
        "base model and LoRA rank) instead of the base model. None: the base model.",
    )
    advantage_normalization: Literal["group_std", "mean_center"] = Field(
        "group_std",
        description="GRPO advantages: group_std divides each group's centred scores by their std; mean_center only "
        "subtracts the group mean.",
    )

    launcher: Literal["local", "slurm", "ray"] = Field(
        "local",
        description="Where the run's supervisor runs: local (this machine), slurm (one sbatch job) or ray (one Ray "
        "job). Cluster jobs need the run folder on a filesystem the cluster shares and mcp-rl at the same path (or "
        "cluster_venv).",
    )
    gpus: int = Field(0, ge=0, le=64, description="slurm/ray: GPUs the job asks for (one node).")
    partition: str | None = Field(
        None, pattern=r"^[A-Za-z0-9_.,-]{1,128}$", description="slurm: the partition (None: the cluster's default)."
    )
    account: str | None = Field(
        None, pattern=r"^[A-Za-z0-9_.-]{1,128}$", description="slurm: the account charged (None: your default)."
    )
    time_limit_minutes: int | None = Field(
        None,
        ge=1,
        le=525_600,
        description="slurm: the job's time limit; the run is stopped gently (final checkpoint kept) before it.",
    )
    ray_address: str | None = Field(
        None,
        description="ray: the Ray dashboard's address, e.g. http://127.0.0.1:8265 (None: that one). Plain http, "
        "private and link-local hosts only when listed in MCP_RL_RAY_HOSTS.",
    )
    cluster_venv: str | None = Field(
        None,
        pattern=r"^/[^\n\x00]{0,1000}$",
        description="slurm/ray: the venv (absolute path on the cluster) whose python runs the job; None: this "
        "server's own interpreter at the same path.",
    )

    tinker_base_url: str | None = Field(
        None,
        description="tinker: a self-hosted Tinker-compatible server (SkyRL's Tinker API, TuFT), e.g. "
        "http://127.0.0.1:8000, which the user must have listed in MCP_RL_TINKER_HOSTS (it receives the Tinker key); "
        "hosted Tinker's own URL is billed as hosted. None: TINKER_BASE_URL, else hosted Tinker.",
    )
    tinker_sdk: Literal["auto", "0.38", "0.25"] = Field(
        "auto",
        description="tinker: the SDK the trainer speaks: 0.38 (hosted Tinker), 0.25 (SkyRL, TuFT; installed on first "
        "use), auto (asked of the server).",
    )

    @field_validator(
        "total_steps",
        "eval_every",
        "held_out_limit",
        "keep_last_checkpoints",
        "max_cost_usd",
        "batch_size",
        "lora_rank",
        "learning_rate",
        "adam_beta1",
        "adam_beta2",
        "max_token_trainer_length",
        "save_checkpoint_interval",
        "gpus",
        "time_limit_minutes",
        mode="before",
    )
    @classmethod
    def _not_a_boolean(cls, value: Any) -> Any:
        # pydantic reads true as 1; an agent sending total_steps=true meant something else.
        if isinstance(value, bool):
            raise ValueError(f"expected a number, got the boolean {value}")
        return value

    @field_validator("tinker_base_url")
    @classmethod
    def _tinker_server(cls, value: str | None, info: ValidationInfo) -> str | None:
        # The Tinker key goes where this URL says: hosted Tinker, or a server the user listed.
        if value is None:
            return None
        settings = (info.context or {}).get("settings")
        try:
            return checked_tinker_url(value, settings.allowed_tinker_hosts if settings else []).text
        except UserError as exc:
            raise ValueError(str(exc)) from None

    @field_validator("ray_address")
    @classmethod
    def _ray_dashboard(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None:
            return None
        settings = (info.context or {}).get("settings")
        allowed = settings.allowed_ray_hosts if settings else []
        try:
            return checked_service_url(
                value, "ray_address", allowed=allowed, setting="MCP_RL_RAY_HOSTS", path_allowed=False
            ).text
        except UserError as exc:
            raise ValueError(str(exc)) from None


def checked_tinker_url(value: str, allowed: list[AllowedHost]) -> ServiceUrl:
    """`tinker_base_url` in canonical form when the Tinker key may go there: hosted Tinker (https),
    or a self-hosted server the user listed in MCP_RL_TINKER_HOSTS. UserError otherwise."""
    if is_hosted_tinker(value):
        url = canonical_url(value, "tinker_base_url")
        if url.scheme != "https":
            raise UserError(f"tinker_base_url {url.text} is hosted Tinker over plain http: use https://.")
        return url
    url = checked_service_url(value, "tinker_base_url", allowed=allowed, setting="MCP_RL_TINKER_HOSTS")
    if not any(entry.admits(url) for entry in allowed):
        raise UserError(
            f"tinker_base_url {url.text} is neither hosted Tinker ({HOSTED_TINKER_HOST}) nor a server listed in "
            "MCP_RL_TINKER_HOSTS: the Tinker key is sent only there. If it is the user's own Tinker-compatible "
            f"server, they add {url.netloc!r} (or 'http://{url.netloc}' for plain http) to MCP_RL_TINKER_HOSTS in "
            "the MCP server's environment and restart it; otherwise clear it with "
            "rl_edit_config('tinker_base_url', null)."
        )
    return url


RUN_OPTION_NAMES = tuple(RunOptions.model_fields)


@lru_cache(maxsize=1)
def _yaml(name: str) -> dict[str, Any]:
    with open(configs_dir() / name, encoding="utf-8") as fh:
        return yaml.safe_load(fh) or {}


def effective_backend(settings: Settings, choice: str) -> Literal["local", "tinker"]:
    if choice == "auto":
        return "tinker" if settings.default_backend == "tinker" else "local"
    return "tinker" if choice == "tinker" else "local"


def run_option_defaults(settings: Settings, backend: str, environment: EnvironmentRef | None = None) -> dict[str, Any]:
    """The backend's defaults; the bundled GEM environment adds its recipe's (`<backend>_gem`)."""
    table = _yaml("run_options.yaml")
    defaults = dict(table[backend])
    if environment is not None and is_bundled_gem(environment):
        defaults.update(table.get(f"{backend}_gem") or {})
    if settings.wandb_project:
        defaults["wandb_project"] = settings.wandb_project
    return defaults


def is_bundled_gem(environment: EnvironmentRef) -> bool:
    return environment.file_path.name == "gem_env.py" and environment.class_name == "GemEnv"


def resolve_run_options(
    settings: Settings, edits: dict[str, Any], environment: EnvironmentRef | None = None
) -> tuple[RunOptions, dict[str, Any]]:
    """The effective run options and the defaults they were built on (strict: a bad edit raises)."""
    backend = effective_backend(settings, edits.get("backend", "auto"))
    defaults = {"backend": "auto", **run_option_defaults(settings, backend, environment)}
    return RunOptions.model_validate({**defaults, **edits}, context={"settings": settings}), defaults


def clean_run_options(settings: Settings, stored: Any) -> tuple[dict[str, Any], list[str]]:
    """Stored run options with unknown names dropped and bad values reset to their defaults.

    session.json may have been written by another version of mcp-rl or edited by hand; one bad
    option must not make every config tool fail. Each repair is described in a note.
    """
    if not isinstance(stored, dict):
        return {}, [
            f"run_options in session.json was not a mapping ({clip(stored)}); all run options are at their defaults."
        ]
    options = dict(stored)
    notes: list[str] = []
    for name in [n for n in options if n not in RUN_OPTION_NAMES]:
        notes.append(f"Unknown run option {clip(name)} in session.json was ignored (value {clip(options.pop(name))}).")
    if "backend" in options and options["backend"] not in ("auto", "local", "tinker"):
        notes.append(f"Run option backend had a bad value {clip(options.pop('backend'))}; reset to its default 'auto'.")
    # Each value alone against the defaults: a bad one is named and dropped, the others kept.
    for _ in range(len(RUN_OPTION_NAMES)):
        try:
            resolve_run_options(settings, options)
            break
        except ValidationError as exc:
            bad = {str(err["loc"][0]) for err in exc.errors() if err["loc"] and err["loc"][0] in options}
            if not bad:
                raise
            for name in sorted(bad):
                value = options.pop(name)
                detail = "; ".join(e["msg"] for e in exc.errors() if e["loc"] and e["loc"][0] == name)
                notes.append(
                    f"Run option {name} had a bad value {clip(value)} in session.json ({detail}); reset to its default."
                )
    return options, notes


# --- locked fields --------------------------------------------------------------------------
class LockedFields(BaseModel):
    env: dict[str, Any]
    openai: dict[str, Any]


def locked_fields(backend: str) -> LockedFields:
    raw = _yaml("locked.yaml")
    profile = (raw.get("profiles") or {}).get(backend) or {}
    return LockedFields(
        env={**raw.get("env", {}), **profile.get("env", {})},
        openai={**raw.get("openai", {}), **profile.get("openai", {})},
    )
