"""GEM on the tinker profile follows GEM's Tinker recipe; the local profile keeps CPU-sized values;
fields a run sets win over both."""

from __future__ import annotations

from pathlib import Path

from mcp_rl.environments.bundled.gem_env import GemEnvConfig, resolve_profile


def test_a_hub_model_gets_the_tinker_recipe(tmp_path: Path) -> None:
    c = resolve_profile(GemEnvConfig(tokenizer_name="Qwen/Qwen3-8B"))
    assert (c.profile, c.template, c.max_tokens_per_turn, c.num_envs, c.max_turns) == (
        "tinker",
        "qwen3_game",
        1024,
        64,
        None,
    )


def test_a_local_model_folder_keeps_the_cpu_sized_values(tmp_path: Path) -> None:
    c = resolve_profile(GemEnvConfig(tokenizer_name=str(tmp_path)))
    assert (c.profile, c.template, c.max_tokens_per_turn, c.num_envs, c.max_turns) == (
        "local",
        "qwen3_game_prefill",
        16,
        4,
        10,
    )


def test_set_fields_and_an_explicit_profile_win(tmp_path: Path) -> None:
    c = resolve_profile(GemEnvConfig(tokenizer_name="Qwen/Qwen3-8B", num_envs=8, template="chat", max_turns=5))
    assert (c.template, c.num_envs, c.max_turns, c.max_tokens_per_turn) == ("chat", 8, 5, 1024)
    c = resolve_profile(GemEnvConfig(tokenizer_name=str(tmp_path), profile="tinker"))
    assert c.template == "qwen3_game" and c.max_turns is None
