"""Each host's own MCP client, from npm at pinned versions (tests/hosts/clients.py), configured
from the README's own snippet for it, with no model key: Claude Code (`claude mcp add` from the
README, `claude mcp list`), Codex (`codex app-server`: status, tools, one call), Gemini CLI (its
core's discovery, then a dependent pair with `wait_for_previous` through its own tool code) and
opencode (`opencode mcp list`). The number of tools is the server's own count."""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from mcp_rl.server import build_server
from mcp_rl.settings import Settings
from tests.conftest import make_env
from tests.hosts.clients import mcp_rl_command, node_modules, readme_block, readme_json

pytestmark = pytest.mark.slow

HERE = Path(__file__).resolve().parent
RUN_TIMEOUT_S = 300
UNKNOWN_FORMAT = "unknown format"


@pytest.fixture(scope="module")
def modules() -> Path:
    return node_modules()


def server_env(home: Path) -> dict[str, str]:
    """What the test adds for its own isolation (a temporary state home; a worktree's sources)."""
    env = make_env(home)
    if os.environ.get("PYTHONPATH"):
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    return env


def tool_count(home: Path) -> int:
    return len(asyncio.run(build_server(Settings.from_env(make_env(home))).list_tools()))


def host_env(tmp_path: Path, modules: Path, **extra: str) -> dict[str, str]:
    """A host process's own environment: a fresh HOME, no keys, no update checks."""
    home = tmp_path / "user-home"
    home.mkdir(exist_ok=True)
    return {
        "PATH": f"{modules / '.bin'}:{os.environ.get('PATH', '')}",
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "DISABLE_AUTOUPDATER": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "OPENCODE_DISABLE_AUTOUPDATE": "1",
        "NO_COLOR": "1",
        **extra,
    }


def run(argv: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    assert done.returncode == 0, (argv, done.stdout[-2000:], done.stderr[-2000:])
    return done


def steps(stdout: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for line in stdout.splitlines():
        if line.startswith("{"):
            entry = json.loads(line)
            out[entry["step"]] = entry["result"]
    return out


def test_claude_code_connects_from_the_readme_command(modules: Path, home: Path, tmp_path: Path) -> None:
    add = next(line for line in readme_block("Claude Code", "bash").splitlines() if line.startswith("claude mcp add"))
    argv = shlex.split(add)
    assert argv[-2:] == [mcp_rl_command(), "serve"] and "--env" not in argv
    # Claude Code passes its own environment to a stdio server: the test's isolation goes there.
    env = host_env(tmp_path, modules, **server_env(home))
    run(argv, env, tmp_path)
    listed = run(["claude", "mcp", "list"], env, tmp_path)
    output = listed.stdout + listed.stderr
    line = next((x for x in listed.stdout.splitlines() if x.startswith("rl:")), "")
    assert "Connected" in line and "Failed" not in line, output
    assert UNKNOWN_FORMAT not in output, output


def test_codex_app_server_connects_lists_the_tools_and_calls_one(modules: Path, home: Path, tmp_path: Path) -> None:
    config = tomllib.loads(readme_block("Codex", "toml"))
    server = config["mcp_servers"]["rl"]
    assert server["command"] == mcp_rl_command() and server["startup_timeout_sec"] >= 30
    # Codex passes only a small baseline of variables: the test's isolation goes in the server's env.
    server["env"] = server_env(home)
    codex_home = tmp_path / "codex-home"
    codex_home.mkdir()
    (codex_home / "config.toml").write_text(_toml(config))
    env = host_env(tmp_path, modules, CODEX_HOME=str(codex_home))
    done = run([sys.executable, str(HERE / "codex_driver.py"), str(modules / ".bin" / "codex")], env, tmp_path)
    got = steps(done.stdout)
    rl = got["status"]["rl"]
    assert rl is not None and rl["serverInfo"]["name"] == "mcp-rl", got["status"]
    assert len(rl["tools"]) == tool_count(tmp_path / "count-home") and "rl_start_training" in rl["tools"]
    call = got["call"]["result"]
    assert call["isError"] is False and call["structuredContent"]["runs"] == [], got["call"]


def test_gemini_cli_core_discovers_and_runs_a_dependent_pair(modules: Path, home: Path, tmp_path: Path) -> None:
    server = readme_json("Gemini CLI")["mcpServers"]["rl"]
    assert server["command"] == mcp_rl_command() and server["timeout"] >= 30000
    # Gemini strips secret-looking variables from what a server inherits; the test adds its own.
    server["env"] = {**server.get("env", {}), **server_env(home)}
    env = host_env(tmp_path, modules)
    done = run(["node", str(HERE / "gemini_driver.mjs"), str(modules), json.dumps(server)], env, tmp_path)
    got = steps(done.stdout)
    found = got["discovery"]
    assert len(found["tools"]) == tool_count(tmp_path / "count-home") and found["wait_for_previous_added"], found
    assert all(name.startswith("mcp_rl_") for name in found["names"]), found["names"]
    for step in ("list", "select", "config"):
        assert got[step]["error"] is None, (step, got[step])
    assert '"environment": "arithmetic"' in json.dumps(got["config"]["llmContent"]).replace('\\"', '"')
    assert not any(UNKNOWN_FORMAT in d for d in got["diagnostics"]), got["diagnostics"]
    assert UNKNOWN_FORMAT not in done.stderr


def test_opencode_connects_from_the_readme_config(modules: Path, home: Path, tmp_path: Path) -> None:
    config = readme_json("opencode")
    server = config["mcp"]["rl"]
    assert server["type"] == "local" and server["command"] == [mcp_rl_command(), "serve"]
    assert server["timeout"] >= 30000
    project = tmp_path / "project"
    project.mkdir()
    (project / "opencode.json").write_text(json.dumps(config))
    # opencode passes its own environment to a local server: the test's isolation goes there.
    env = host_env(tmp_path, modules, **server_env(home))
    listed = run(["opencode", "mcp", "list"], env, project)
    output = listed.stdout + listed.stderr
    assert any("rl" in line and "connected" in line for line in output.splitlines()), output
    assert "failed" not in output.lower() and UNKNOWN_FORMAT not in output, output


def _toml(config: dict[str, Any]) -> str:
    """The two levels of tables Codex's config has here, written back as TOML."""
    lines: list[str] = []
    for name, server in config["mcp_servers"].items():
        lines.append(f"[mcp_servers.{name}]")
        lines += [f"{key} = {json.dumps(value)}" for key, value in server.items() if not isinstance(value, dict)]
        for key, table in ((k, v) for k, v in server.items() if isinstance(v, dict)):
            lines.append(f"[mcp_servers.{name}.{key}]")
            lines += [f"{k} = {json.dumps(v)}" for k, v in table.items()]
    return "\n".join(lines) + "\n"
