"""`mcp-rl doctor` says whether the Tinker model's tokenizer is on this machine and how to get it."""

from __future__ import annotations

from pathlib import Path

import pytest

from mcp_rl.doctor import Status, check_tokenizer, run_checks, tokenizer_repo
from mcp_rl.settings import Settings
from tests.conftest import make_env
from tests.fakes.tinker_server import write_tiny_tokenizer


def tinker_settings(home: Path, **extra: str) -> Settings:
    return Settings.from_env(make_env(home, TINKER_API_KEY="tml-doctor-test", **extra))


def test_without_a_tinker_key_there_is_nothing_to_check(home: Path) -> None:
    check = {c.name: c for c in run_checks(make_env(home), offline=True).checks}["tinker tokenizer"]
    assert check.status == Status.SKIP


def test_a_tokenizer_folder_is_checked(home: Path, tmp_path: Path) -> None:
    good = write_tiny_tokenizer(tmp_path / "tok")
    assert check_tokenizer(tinker_settings(home, MCP_RL_TOKENIZER_PATH=good), probe_hub=False).status == Status.OK
    bad = check_tokenizer(tinker_settings(home, MCP_RL_TOKENIZER_PATH=str(tmp_path)), probe_hub=False)
    assert bad.status == Status.FAIL and "MCP_RL_TOKENIZER_PATH" in bad.fix


def test_a_cached_tokenizer_is_ok(home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from huggingface_hub import constants

    snapshot = tmp_path / "hub" / "models--Qwen--Qwen3-8B" / "snapshots" / "abc"
    snapshot.mkdir(parents=True)
    (snapshot / "tokenizer_config.json").write_text("{}")
    (tmp_path / "hub" / "models--Qwen--Qwen3-8B" / "refs").mkdir()
    (tmp_path / "hub" / "models--Qwen--Qwen3-8B" / "refs" / "main").write_text("abc")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    check = check_tokenizer(tinker_settings(home), probe_hub=False)
    assert check.status == Status.OK and "Qwen/Qwen3-8B" in check.detail


def test_not_cached_says_how_to_fetch_it(home: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "empty-hub"))
    offline = check_tokenizer(tinker_settings(home), probe_hub=True)  # tests run with HF_HUB_OFFLINE=1
    assert (
        offline.status == Status.WARN and "HF_HUB_OFFLINE" in offline.fix and "hf download Qwen/Qwen3-8B" in offline.fix
    )
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    asked: list[str] = []

    def reachable(url: str, headers: dict[str, str]) -> tuple[int, bytes]:
        asked.append(url)
        return 200, b"{}"

    def unreachable(url: str, headers: dict[str, str]) -> tuple[int, bytes]:
        raise OSError("no route to host")

    ok = check_tokenizer(tinker_settings(home), probe_hub=True, probe=reachable)
    assert ok.status == Status.OK and "fetches it" in ok.detail and asked[0].endswith("/api/models/Qwen/Qwen3-8B")
    down = check_tokenizer(tinker_settings(home), probe_hub=True, probe=unreachable)
    assert down.status == Status.FAIL and "unreachable" in down.detail
    assert "hf download" in down.fix and "MCP_RL_TOKENIZER_PATH" in down.fix


def test_the_sdks_tokenizer_repositories() -> None:
    assert tokenizer_repo("Qwen/Qwen3-8B") == "Qwen/Qwen3-8B"
    assert tokenizer_repo("meta-llama/Llama-3.1-8B") == "thinkingmachineslabinc/meta-llama-3-instruct-tokenizer"
    assert tokenizer_repo("org/model/variant:tag") == "org/model"
