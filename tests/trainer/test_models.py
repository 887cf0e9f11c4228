"""The model cache: "default" is converted once (locked, atomic) and reused; paths must exist."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from mcp_rl.errors import UserError
from mcp_rl.models import COMPLETE_MARKER, DEFAULT_MODEL_DIRNAME, resolve_model
from mcp_rl.settings import Settings


def settings_for(home: Path, **env: str) -> Settings:
    return Settings.from_env({"MCP_RL_HOME": str(home), **env})


def test_a_missing_folder_is_a_user_error(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="not a local Hugging Face model folder"):
        resolve_model(settings_for(tmp_path), str(tmp_path / "nowhere"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match="never downloaded"):
        resolve_model(settings_for(tmp_path), str(tmp_path / "empty"))


def test_a_hub_name_is_not_fetched(tmp_path: Path) -> None:
    with pytest.raises(UserError):
        resolve_model(settings_for(tmp_path), "HuggingFaceTB/SmolLM2-135M-Instruct")


def test_a_local_folder_is_used_as_is(tmp_path: Path) -> None:
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    assert resolve_model(settings_for(tmp_path), str(folder)) == folder.resolve()


def test_default_prefers_mcp_rl_model(tmp_path: Path) -> None:
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    assert resolve_model(settings_for(tmp_path, MCP_RL_MODEL=str(folder)), "default") == folder.resolve()


def test_a_finished_conversion_is_reused(tmp_path: Path) -> None:
    target = tmp_path / "models" / DEFAULT_MODEL_DIRNAME
    target.mkdir(parents=True)
    (target / "config.json").write_text("{}")
    (target / COMPLETE_MARKER).write_text("done")
    assert resolve_model(settings_for(tmp_path), "default") == target


@pytest.mark.slow  # the real conversion (~20 s)
def test_the_shared_default_is_a_standard_folder(model_dir: Path) -> None:
    folder = model_dir
    for name in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        assert (folder / name).is_file(), name


@pytest.mark.slow
def test_concurrent_ensure_converts_once(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "MCP_RL_MODEL"}
    env.update(MCP_RL_HOME=str(tmp_path), HF_HUB_OFFLINE="1")
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "mcp_rl.models", "ensure"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
        )
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=900) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [o[1][-2000:] for o in outs]
    paths = {o[0].strip() for o in outs}
    target = tmp_path / "models" / DEFAULT_MODEL_DIRNAME
    assert paths == {str(target)}
    assert (target / COMPLETE_MARKER).is_file() and (target / "model.safetensors").is_file()
    # Only the finished folder and the lock remain: no half-written temporary folders.
    leftovers = [p.name for p in (tmp_path / "models").iterdir() if p.name != DEFAULT_MODEL_DIRNAME]
    assert leftovers == [f".{DEFAULT_MODEL_DIRNAME}.lock"]
