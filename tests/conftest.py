"""Shared test fixtures: a fresh state directory per test and settings pointing at it."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from mcp_rl.settings import Settings

FIXTURES = Path(__file__).parent / "fixtures"
REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def home(tmp_path: Path) -> Path:
    path = tmp_path / "home"
    path.mkdir()
    return path


def make_env(home: Path, **extra: str) -> dict[str, str]:
    """Environment variables for a server or child under test: only what we choose.

    MCP_RL_MODEL is passed on, so every test home uses the one converted default model
    (see `_shared_default_model`) instead of converting it again.
    """
    env = {"MCP_RL_HOME": str(home), "MCP_RL_STATUS_MIN_INTERVAL": "0", "HF_HUB_OFFLINE": "1"}
    if os.environ.get("MCP_RL_MODEL"):
        env["MCP_RL_MODEL"] = os.environ["MCP_RL_MODEL"]
    env.update(extra)
    return env


@pytest.fixture(scope="session", autouse=True)
def _shared_default_model() -> None:
    """Convert the embedded default model once (in the real state dir) and share it with all tests."""
    if os.environ.get("MCP_RL_MODEL"):
        return
    from mcp_rl.models import resolve_model

    os.environ["MCP_RL_MODEL"] = str(resolve_model(Settings.from_env(), "default"))


@pytest.fixture
def settings(home: Path) -> Settings:
    return Settings.from_env(make_env(home))


def stdio_params(home: Path, **extra: str):
    """Parameters for the real server as a stdio subprocess (the SDK passes only a minimal env)."""
    from mcp import StdioServerParameters

    env = make_env(home, **extra)
    env["PATH"] = os.environ.get("PATH", "")
    return StdioServerParameters(command=sys.executable, args=["-m", "mcp_rl", "serve"], env=env, cwd=str(REPO))
