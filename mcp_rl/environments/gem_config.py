"""The config of mcp-rl's GEM environment (`bundled/gem_env.py`): its fields, the profiles that
fill the ones a run leaves unset (a small local model, or GEM's Tinker recipe), and the fixed
seeds every evaluation plays.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from atroposlib.envs.base import BaseEnvConfig
from pydantic import Field

from mcp_rl.environments.gem_episodes import Template

Profile = Literal["auto", "local", "tinker"]
# What template, max_tokens_per_turn, num_envs and max_turns are when a run leaves them unset.
PROFILES: dict[str, dict[str, Any]] = {
    # The embedded 135M model on 2 CPU cores: short prefilled answers, few episodes at once.
    "local": {"template": "qwen3_game_prefill", "max_tokens_per_turn": 16, "num_envs": 4, "max_turns": 10},
    # GEM's Tinker recipe for games (tinker-cookbook recipes/gem_rl): the qwen3_game prompt, long
    # turns to reason in, 64 environments in parallel, and no turn cap besides the game's own.
    "tinker": {"template": "qwen3_game", "max_tokens_per_turn": 1024, "num_envs": 64, "max_turns": None},
}


class GemEnvConfig(BaseEnvConfig):
    env_id: str = Field(
        "game:GuessTheNumber-v0-easy",
        description="GEM environment id (rl_list_environments(filter='game') lists them), e.g. game:Wordle-v0-easy.",
    )
    env_kwargs: dict[str, Any] = Field(
        default_factory=dict, description='Extra keyword arguments for gem.make, e.g. {"max_turns": 6}.'
    )
    profile: Profile = Field(
        "auto",
        description="Defaults of template, max_tokens_per_turn, num_envs and max_turns when they are left unset: "
        "local (small CPU model: qwen3_game_prefill, 16 tokens per turn, 4 envs, 10 turns) or tinker (GEM's Tinker "
        "recipe: qwen3_game, 1024 tokens per turn, 64 envs, no turn cap). auto: local when the run's model is a "
        "local folder, tinker when it is a hub model name (the Tinker backend).",
    )
    num_envs: int | None = Field(
        None, ge=1, le=256, description="Episodes played in parallel while a group is collected (unset: the profile's)."
    )
    wrappers: str = Field(
        "concat",
        description="Comma-separated GEM wrappers, applied in order: concat (observation keeps the history), "
        "concat_with_action, concat_chat, concat_chat_on_reset, python_tool, episode_tracking; '' for none.",
    )
    template: Template | None = Field(
        None,
        description="Observation template (unset: the profile's). qwen3_game / qwen3_general: the recipe's Qwen3 chat prompts asking for "
        "step-by-step reasoning and a \\boxed{} answer (use with larger models and max_tokens_per_turn ~2048); "
        "qwen3_game_prefill: the game prompt with the answer started as \\boxed{ and cut at } (short answers, "
        "small models); chat: the model's own chat template; no: the raw observation.",
    )
    gamma: float = Field(0.9, ge=0.0, le=1.0, description="Discount of per-turn returns: G_t = r_t + gamma * G_{t+1}.")
    batch_normalize: bool = Field(
        True, description="ReBN: normalise returns to zero mean, unit std across the transitions of a group."
    )
    max_turns: int | None = Field(
        None,
        ge=1,
        le=1000,
        description="Turns after which an episode is cut (the GEM environment's own limit applies "
        "first; unset: the profile's, none on tinker).",
    )
    max_tokens_per_turn: int | None = Field(
        None, ge=1, le=32768, description="Most tokens the policy samples per turn (unset: the profile's)."
    )
    temperature: float = Field(1.0, ge=0.0, le=2.0, description="Sampling temperature of the policy's actions.")
    success_reward: float = Field(
        1.0, description="An episode counts as a success when its last reward is at least this (GEM's win reward)."
    )
    partial_credit: bool = Field(
        True,
        description="Train on GEM's rewards as given, including partial credit for a near miss (GuessTheNumber "
        "pays 1 - distance/range at the turn limit). false: only wins (and penalties) carry reward, which "
        "stops a safe near-miss from paying almost as well as winning; metrics still report GEM's own returns.",
    )
    eval_episodes: int = Field(16, ge=0, le=10_000, description="Episodes played (greedily) by each evaluation.")
    seed: int = Field(
        0,
        ge=0,
        lt=500_000_000,
        description="Seed of the training episodes' starting states (episode i uses seed + i; evaluation plays "
        "its own fixed seeds from 1e9).",
    )


# Evaluation plays seeds EVAL_SEED_BASE, EVAL_SEED_BASE + 1, ...: the same games every evaluation
# and far from the training seeds (`seed`, `seed + 1`, ... one per episode played).
EVAL_SEED_BASE = 1_000_000_000


def eval_seeds(episodes: int) -> list[int]:
    return [EVAL_SEED_BASE + i for i in range(episodes)]


def resolve_profile(config: GemEnvConfig) -> GemEnvConfig:
    """`config` with the unset fields filled from its profile (auto: by where the model lives)."""
    profile = config.profile
    if profile == "auto":
        profile = "local" if Path(str(config.tokenizer_name)).expanduser().is_dir() else "tinker"
    defaults = PROFILES[profile]
    unset = {name: value for name, value in defaults.items() if getattr(config, name) is None}
    return config.model_copy(update={**unset, "profile": profile})
