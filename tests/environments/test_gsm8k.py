"""The bundled GSM8K environment: reward, local data, and the offline error (tests never download)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mcp_rl.environments.bundled.gsm8k import (
    GSM8KEnvConfig,
    extract_answer,
    load_problems,
    score,
)
from mcp_rl.environments.discovery import scan
from mcp_rl.settings import bundled_environments_dir
from tests.conftest import FIXTURES

SAMPLE = FIXTURES / "data" / "gsm8k_sample.jsonl"


@pytest.mark.parametrize(
    ("completion", "answer", "reward"),
    [
        ("3 + 4 = 7\n#### 7", "Tom has 7 apples.\n#### 7", 1.0),
        ("The answer is $1,000.", "#### 1000", 1.0),  # no ####: the last number, commas and $ dropped
        ("#### 7.0", "#### 7", 1.0),
        ("#### 8", "#### 7", 0.0),
        ("I think 7 but #### 9", "#### 7", 0.0),  # the number after the last #### counts
        ("no number at all", "#### 7", 0.0),
        ("", "#### 7", 0.0),
    ],
)
def test_reward(completion: str, answer: str, reward: float):
    assert score(completion, answer) == reward


def test_extract_answer_takes_negative_and_decimal_numbers():
    assert extract_answer("so -3.50 in total") == "-3.5"


def test_listed_among_the_bundled_environments():
    env = scan([bundled_environments_dir()]).get("gsm8k")
    assert env is not None and env.class_name == "GSM8KEnv"


def test_local_data_path_is_split_into_train_and_eval():
    train, test = load_problems(GSM8KEnvConfig(data_path=str(SAMPLE), eval_size=2))
    assert len(train) == 5 and len(test) == 1  # at most a fifth is held out
    assert all(score(p["answer"], p["answer"]) == 1.0 for p in train + test)


def test_offline_without_a_cached_copy_names_the_dataset(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    assert os.environ["HF_HUB_OFFLINE"] == "1"  # tests are offline (conftest)
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "datasets"))
    with pytest.raises(RuntimeError) as err:
        load_problems(GSM8KEnvConfig(dataset_name="openai/gsm8k"))
    text = str(err.value)
    assert "'openai/gsm8k'" in text and "HF_HUB_OFFLINE is set" in text and "data_path" in text


def test_bad_data_path_is_a_clear_error(tmp_path: Path):
    with pytest.raises(RuntimeError, match="Cannot read GSM8K problems"):
        load_problems(GSM8KEnvConfig(data_path=str(tmp_path / "missing.jsonl")))


def test_config_init_defaults_for_the_local_backend():
    from mcp_rl.environments.bundled.gsm8k import GSM8KEnv

    config, servers = GSM8KEnv.config_init()
    assert isinstance(config, GSM8KEnvConfig) and config.dataset_name == "openai/gsm8k"
    assert config.group_size == 8 and config.use_wandb is False
    assert servers[0].server_type == "sglang" and servers[0].tokenizer_name == config.tokenizer_name
