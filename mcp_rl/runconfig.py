"""The run file, `runs/<run_id>/run.yaml`: the one contract between a run's three processes.

The environment process reads it with Atropos's own `--config` flag, which takes the `env:` and
`openai:` sections and ignores the rest. The trainer reads `trainer:` (and `env:` for batch and
group sizes). The supervisor reads `ports:` and `environment:`. No secret is ever written here:
keys reach the processes through their environment.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field

# RunPaths is defined with the run folder; re-exported for run.yaml's readers.
from mcp_rl.atomic import write_text_atomic
from mcp_rl.errors import DamagedState, clip_message
from mcp_rl.rundir import RunPaths as RunPaths
from mcp_rl.urls import is_hosted_tinker

Backend = Literal["local", "tinker"]


class EnvironmentRef(BaseModel):
    """Which Atropos environment a run (or test) uses."""

    model_config = ConfigDict(extra="forbid")

    name: str
    class_name: str
    file_path: Path
    project_root: Path


class Ports(BaseModel):
    """Ports on 127.0.0.1 chosen by the supervisor when the run starts (None until then)."""

    model_config = ConfigDict(extra="forbid")

    api: int | None = None
    inference: int | None = None


class WandbSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    enabled: bool = False
    project: str = "mcp-rl"
    entity: str | None = None
    # The trainer and the environment share one W&B group named after the run.
    group: str | None = None


class TrainerSettings(BaseModel):
    """Everything the trainer process needs besides the env section."""

    model_config = ConfigDict(extra="forbid")

    backend: Backend = "local"
    # A local Hugging Face folder (local backend, and tokenizer for the env) or a Tinker model
    # name such as "Qwen/Qwen3-8B" (tinker backend).
    base_model: str
    tokenizer_path: str | None = None
    num_steps: int = Field(ge=1)
    batch_size: int = Field(ge=1, description="Sequences per training step (a multiple of group_size).")
    group_size: int = Field(ge=1)
    lora_rank: int = Field(default=8, ge=1)
    learning_rate: float = Field(default=4e-5, gt=0)
    adam_beta1: float = 0.9
    adam_beta2: float = 0.95
    adam_eps: float = 1e-8
    max_token_trainer_length: int = Field(default=2048, ge=16)
    save_checkpoint_interval: int = Field(default=0, ge=0, description="0: only the final checkpoint.")
    # Held-out evaluation: before the first step, after the last, and every eval_every steps (0: ends only).
    eval_every: int = Field(default=0, ge=0)
    # Held-out items each evaluation answers: the first N of the environment's set (None: all).
    held_out_limit: int | None = Field(default=None, ge=1)
    # The metric of an environment's own evaluate() that stands for it (None: the documented rule).
    eval_metric: str | None = None
    # Local checkpoints kept besides the final and the kept ones (0: all).
    keep_last_checkpoints: int = Field(default=3, ge=0)
    # Paid backends: the estimated USD the run may spend (None: no cap).
    max_cost_usd: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    advantage_normalization: Literal["group_std", "mean_center"] = "group_std"
    # Deadlines instead of waiting forever (upstream polled /batch with no end).
    batch_wait_timeout_s: float = Field(default=600.0, gt=0)
    api_unreachable_timeout_s: float = Field(default=60.0, gt=0)
    seed: int = 0
    resume: bool = True
    # A kept checkpoint of an earlier run (same base model and LoRA rank) to start from: its
    # local checkpoint folder or tinker:// state path (mcp_rl.weights.checkpoints.resolve_init).
    # Used only while this run has no state of its own; the run counts its steps from 0.
    init_from: str | None = None
    # Tinker: the server (None: TINKER_BASE_URL or hosted Tinker) and the SDK dialect the trainer
    # speaks to it (auto: asked of the server; mcp_rl.supervisor.tinker_sdk).
    tinker_base_url: str | None = None
    tinker_sdk: Literal["auto", "0.38", "0.25"] = "auto"
    wandb: WandbSettings = WandbSettings()

    @property
    def self_hosted_server(self) -> str | None:
        """The Tinker-compatible server of the user's this run trains on (SkyRL's Tinker API, TuFT,
        ...): its `tinker_base_url` when that is not hosted Tinker. No Tinker bill comes for work
        done there (priced at $0), and only the SDK dialect such servers speak reaches it."""
        # Decided on the canonical host: TINKER.THINKINGMACHINES.DEV. or :443 is hosted (and billed).
        if self.backend != "tinker" or not self.tinker_base_url or is_hosted_tinker(self.tinker_base_url):
            return None
        return self.tinker_base_url


class RunConfig(BaseModel):
    """The whole run.yaml."""

    model_config = ConfigDict(extra="forbid")

    run_id: str
    environment: EnvironmentRef
    paths: RunPaths
    ports: Ports = Ports()
    # Atropos BaseEnv config (--config merges it into the env's config_init() defaults).
    env: dict[str, Any]
    # Atropos APIServerConfig list: the trainer's own inference server.
    openai: list[dict[str, Any]]
    trainer: TrainerSettings

    @classmethod
    def load(cls, path: Path) -> RunConfig:
        """Read run.yaml; a damaged one raises DamagedState saying what is wrong (missing: FileNotFoundError)."""
        try:
            with open(path, encoding="utf-8") as fh:
                data = yaml.safe_load(fh)
        except FileNotFoundError:
            raise
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
            raise DamagedState(f"{path} cannot be read as YAML: {clip_message(str(exc), 200)}") from exc
        try:
            return cls.model_validate(data)
        except ValueError as exc:
            raise DamagedState(f"{path} is not a valid run file: {clip_message(str(exc), 300)}") from exc

    def dump(self, path: Path) -> None:
        """Write atomically, so a reader never sees half a file."""
        write_text_atomic(path, yaml.safe_dump(self.model_dump(mode="json"), sort_keys=False))

    def with_ports(self, api: int, inference: int) -> RunConfig:
        """The same run bound to concrete ports: every URL the processes use follows them."""
        env = dict(self.env, rollout_server_url=f"http://127.0.0.1:{api}")
        openai = [dict(server, base_url=f"http://127.0.0.1:{inference}/v1") for server in self.openai]
        return self.model_copy(update={"ports": Ports(api=api, inference=inference), "env": env, "openai": openai})
