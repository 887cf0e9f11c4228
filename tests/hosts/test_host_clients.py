"""Host client code that no one here wrote, driving `mcp-rl serve` as a new user would: Hermes
Agent's MCP client with the README's Hermes configuration, and fastmcp's `Client`. Each lives in
its own virtual environment from PyPI (tests/hosts/venvs.py), so its own mcp SDK version talks
to ours over real stdio. Through discovery, a select, three refused edits in a row and a valid
one (Hermes switches a server off after three errors in a row), a smoke test with the local
model, and status reads."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import make_env
from tests.hosts.clients import mcp_rl_command, readme_block
from tests.hosts.venvs import host_venv

pytestmark = pytest.mark.slow

CHECKOUT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
HERMES = "hermes-agent[mcp]==0.19.0"
FASTMCP = "fastmcp==4.1.6"
DRIVER_TIMEOUT_S = 420
REFUSED = ("edit_unknown", "edit_range", "edit_type")


def readme_hermes_config() -> dict[str, Any]:
    """The README's Hermes `config.yaml` block, with the checkout's `mcp-rl` filled in."""
    config: dict[str, Any] = yaml.safe_load(readme_block("Hermes Agent", "yaml"))
    return config


def _steps(stdout: str) -> dict[str, list[Any]]:
    steps: dict[str, list[Any]] = {}
    for line in stdout.splitlines():
        if line.startswith("{"):
            entry = json.loads(line)
            steps.setdefault(entry.pop("step"), []).append(entry)
    return steps


def _run(argv: list[str], env: dict[str, str], cwd: Path) -> dict[str, list[Any]]:
    done = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=DRIVER_TIMEOUT_S)
    assert done.returncode == 0, done.stderr[-3000:]
    return _steps(done.stdout)


def test_hermes_agent_client_with_the_readme_configuration(home: Path, default_model: Path, tmp_path: Path) -> None:
    python = host_venv("hermes-agent-0.19.0", HERMES)
    config = readme_hermes_config()
    server = config["mcp_servers"]["rl"]
    assert server["command"] == mcp_rl_command() and server["timeout"] == 300
    # The README's env holds no key (none here); the test adds only its own isolation.
    assert not any("KEY" in name or "TOKEN" in name for name in server.get("env") or {})
    server["env"] = {**(server.get("env") or {}), **make_env(home, MCP_RL_MODEL=str(default_model))}
    if os.environ.get("PYTHONPATH"):  # a worktree's sources
        server["env"]["PYTHONPATH"] = os.environ["PYTHONPATH"]
    hermes_home = tmp_path / "hermes-home"
    hermes_home.mkdir()
    (hermes_home / "config.yaml").write_text(yaml.safe_dump(config))
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path), "HERMES_HOME": str(hermes_home)}
    steps = _run([str(python), str(HERE / "hermes_driver.py")], env, tmp_path)

    # Two "no environment selected" and an unknown run id are answers (found: false), so the
    # valid call after them is answered, not cut off by Hermes' three-errors-in-a-row breaker.
    exploring = steps["config_before"] + steps["status_unknown"]
    assert len(exploring) == 3
    for answer in (entry["result"] for entry in exploring):
        assert "error" not in answer and answer["structuredContent"]["found"] is False, answer
    after = steps["list_runs_after"][0]["result"]
    assert "error" not in after and after["structuredContent"]["runs"] == [], after
    tools = steps["discovery"][0]["result"]
    assert "mcp__rl__rl_start_training" in tools and all(t.startswith("mcp__rl__") for t in tools), tools
    config_now = steps["config"][0]["result"]["structuredContent"]
    assert config_now["backend"] == "local", config_now  # no keys: the local backend, not Tinker
    for step in REFUSED:
        answer = steps[step][0]["result"]
        assert "error" not in answer, (step, answer)  # not counted by Hermes' circuit breaker
        assert answer["structuredContent"]["applied"] is False and answer["structuredContent"]["refused"]
    valid = steps["edit_valid"][0]["result"]
    assert "error" not in valid and valid["structuredContent"]["applied"] is True, valid
    assert "error" not in steps["list_runs"][0]["result"]
    assert "local" in json.dumps(steps["smoke"][0]["result"])
    final = steps["collect"][-1]["result"]["structuredContent"]
    assert final["state"] == "completed", final
    assert final["models_tested"][0]["state"] == "succeeded", final["models_tested"][0]
    listed = steps["list_tests"][0]["result"]["structuredContent"]["tests"]
    assert [t["test_id"] for t in listed] == [final["test_id"]]
    assert "unreachable" not in json.dumps(steps)


def test_fastmcp_client(home: Path, default_model: Path, tmp_path: Path) -> None:
    python = host_venv("fastmcp-4.1.6", FASTMCP)
    env = make_env(home, MCP_RL_MODEL=str(default_model))
    command = mcp_rl_command()
    steps = _run(
        [str(python), str(HERE / "fastmcp_driver.py"), command, json.dumps(env)],
        {"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path)},
        tmp_path,
    )
    assert "rl_start_training" in steps["discovery"][0]["structured"]["tools"]
    assert not steps["select"][0]["is_error"], steps["select"][0]["text"]
    for step in REFUSED:
        answer = steps[step][0]
        assert not answer["is_error"] and answer["structured"]["applied"] is False, (step, answer)
    assert steps["edit_valid"][0]["structured"]["applied"] is True
    final = steps["collect"][-1]["structured"]
    assert final["state"] == "completed" and final["models_tested"][0]["state"] == "succeeded", final
    assert not steps["list_runs"][0]["is_error"] and not steps["list_tests"][0]["is_error"]
