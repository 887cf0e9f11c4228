"""OpenEnv environments (Hugging Face / Meta's `openenv`), played and trained like GEM games.

An OpenEnv environment is a FastAPI server (`reset`, `step`, `state`; a WebSocket session at
`/ws`). This Atropos environment either serves a local environment folder (the layout
`openenv init` makes: `openenv.yaml`, `models.py`, `server/app.py`) itself, with uvicorn in the
openenv family's interpreter (mcp_rl.environments.families; openenv needs `mcp<2`, so never in
mcp-rl's own) on 127.0.0.1, or talks to `openenv_url` (a server the user runs).

The server started here is this process's child, in its process group and carrying the run's
marker, so stopping the run (mcp_rl.processes.stop: the group and the marked descendants) stops
it too; this process also ends it on the way out.

Episodes are GEM's (gem_env.py): each turn the model answers, the answer becomes an action
(openenv_actions: JSON, fenced JSON, or the action's one required field), the session steps;
rewards become per-turn discounted returns in groups, a failed episode is dropped and counted,
evaluation plays fixed seeds training never reaches. A session refused for capacity
(`CAPACITY_REACHED`, past the server's `max_concurrent_envs`) waits for a free one.
"""

from __future__ import annotations

import asyncio
import atexit
import json
import logging
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import yaml
from atroposlib.envs.base import APIServerConfig, BaseEnv
from pydantic import Field
from websockets.exceptions import WebSocketException
from websockets.sync.client import ClientConnection, connect

from mcp_rl.environments import families
from mcp_rl.environments.bundled.gem_env import GemEnv, GemEnvConfig
from mcp_rl.environments.gem_episodes import EpisodeFailed
from mcp_rl.environments.openenv_actions import ActionError, action_hint, observation_text, parse_action
from mcp_rl.ports import allocate_ports
from mcp_rl.settings import Settings

log = logging.getLogger("mcp_rl.openenv_env")

MANIFEST = "openenv.yaml"
DEFAULT_APP = "server.app:app"
# Seconds one WebSocket answer may take (a step of a slow environment included).
ANSWER_TIMEOUT_S = 120.0


class OpenEnvConfig(GemEnvConfig):
    openenv_dir: str = Field(
        "",
        description="A local OpenEnv environment folder (with openenv.yaml; `openenv init` makes one), served "
        "by mcp-rl in the openenv interpreter. Set by selecting openenv:<name>.",
    )
    openenv_url: str = Field(
        "",
        description="The URL of a running OpenEnv server (e.g. http://127.0.0.1:8000) to use instead of "
        "serving openenv_dir.",
    )
    openenv_ready_s: float = Field(
        120.0, gt=0, le=3600, description="Seconds the served environment may take to answer /health."
    )
    openenv_session_wait_s: float = Field(
        300.0,
        gt=0,
        le=3600,
        description="Seconds an episode waits for a free session when the server is at max_concurrent_envs.",
    )
    env_id: str = Field("", description="Unused by OpenEnv environments (GEM's environment id).")
    wrappers: str = Field("", description="Unused by OpenEnv environments (the history is kept here).")


class OpenEnvSession:
    """One WebSocket session with an OpenEnv server, behaving like a GEM env (reset/step)."""

    def __init__(self, ws_url: str, action_schema: dict[str, Any], wait_s: float) -> None:
        self.ws_url = ws_url
        self.schema = action_schema
        self.wait_s = wait_s
        self.ws: ClientConnection | None = None
        self.history: list[str] = []

    def _ask(self, message: dict[str, Any]) -> dict[str, Any]:
        assert self.ws is not None
        self.ws.send(json.dumps(message))
        reply = json.loads(self.ws.recv(timeout=ANSWER_TIMEOUT_S))
        if not isinstance(reply, dict):
            raise EpisodeFailed(f"the OpenEnv server answered {type(reply).__name__}, not an object")
        return reply

    def _open_and_reset(self, seed: int) -> dict[str, Any]:
        deadline = time.monotonic() + self.wait_s
        pause = 0.1
        while True:
            if self.ws is None:
                self.ws = connect(self.ws_url, open_timeout=30, max_size=None)
            reply = self._ask({"type": "reset", "data": {"seed": seed}})
            if reply.get("type") != "error":
                return reply
            data = reply.get("data") or {}
            code = str(data.get("code", ""))
            self.close()
            if "CAPACITY" not in code.upper():
                raise EpisodeFailed(f"reset refused: {data.get('message', reply)}")
            if time.monotonic() > deadline:
                raise EpisodeFailed(f"no free session in {self.wait_s:g} s (the server is at its max_concurrent_envs)")
            time.sleep(pause)  # a session ends within an episode's time: queue for it
            pause = min(pause * 2, 2.0)

    def reset(self, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        try:
            reply = self._open_and_reset(int(seed or 0))
        except (OSError, WebSocketException, TimeoutError) as exc:
            self.close()
            raise EpisodeFailed(f"the OpenEnv session failed: {type(exc).__name__}: {exc}") from exc
        data = reply.get("data") or {}
        self.history = [observation_text(data.get("observation") or {}) + "\n" + action_hint(self.schema)]
        return self.history[0], {}

    def step(self, answer: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        try:
            action = parse_action(answer, self.schema)
        except ActionError as exc:
            # Not an action: the environment never sees it; the episode ends with nothing earned
            # (as an invalid move loses a TextArena game), so a model that cannot yet answer in
            # the action's form plays short episodes instead of max_turns of them.
            self.history.append(f"Your answer {answer.strip()[:80]!r} is not a valid move ({exc}).")
            return "\n".join(self.history), 0.0, True, False, {"invalid_action": True}
        try:
            reply = self._ask({"type": "step", "data": action})
        except (OSError, WebSocketException, TimeoutError) as exc:
            self.close()
            raise EpisodeFailed(f"the OpenEnv session failed: {type(exc).__name__}: {exc}") from exc
        data = reply.get("data") or {}
        if reply.get("type") == "error":
            code = str(data.get("code", ""))
            if "VALIDATION" in code.upper():
                self.history.append(f"Your move {json.dumps(action)} was rejected: {data.get('message', '')}")
                return "\n".join(self.history), 0.0, True, False, {"invalid_action": True}
            raise EpisodeFailed(f"step failed: {data.get('message', reply)}")
        self.history.append(observation_text(data.get("observation") or {}))
        reward = data.get("reward")
        return "\n".join(self.history), float(reward or 0.0), bool(data.get("done")), False, {}

    def close(self) -> None:
        if self.ws is None:
            return
        ws, self.ws = self.ws, None
        try:
            ws.send(json.dumps({"type": "close"}))
        except (OSError, WebSocketException):
            pass
        ws.close()


def _get_json(url: str, timeout_s: float) -> Any:
    with urllib.request.urlopen(url, timeout=timeout_s) as resp:
        return json.loads(resp.read())


class OpenEnvEnv(GemEnv, BaseEnv):
    """OpenEnv environments (a local folder served in the openenv interpreter, or a URL)."""

    name = "openenv"
    env_config_cls = OpenEnvConfig

    def __init__(self, config: OpenEnvConfig, server_configs: Any, slurm: bool = False, testing: bool = False) -> None:
        super().__init__(config, server_configs, slurm, testing)
        self.config: OpenEnvConfig = config
        self._server: subprocess.Popen[bytes] | None = None
        self._base_url = ""
        # On the way out, however the process ends normally: close sessions, stop our server.
        atexit.register(self.close_sessions)
        self._schema: dict[str, Any] = {}
        self._sessions: list[OpenEnvSession] = []

    @classmethod
    def config_init(cls) -> tuple[OpenEnvConfig, list[APIServerConfig]]:
        base, servers = GemEnv.config_init()
        return OpenEnvConfig(**base.model_dump(exclude={"env_id", "wrappers"})), servers

    # --- the server -------------------------------------------------------------------------
    def _serve_folder(self, given: str) -> str:
        folder = Path(given).expanduser()
        manifest = folder / MANIFEST
        if not manifest.is_file():
            raise ValueError(f"openenv_dir {folder} has no {MANIFEST}: not an OpenEnv environment folder")
        spec = yaml.safe_load(manifest.read_text()) or {}
        app = str(spec.get("app") or DEFAULT_APP)
        settings = Settings.from_env()
        # Made on first use (selection starts it in the background; this waits for it).
        python = families.build(settings, families.Family.OPENENV).python
        port = allocate_ports(1)[0]
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(folder), str(folder.parent)])
        argv = [str(python), "-m", "uvicorn", app, "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"]
        log.info("serving OpenEnv %s: %s", folder, " ".join(argv))
        # Our child, in our process group, with the run's marker (inherited): stopped with the run.
        self._server = subprocess.Popen(
            argv, cwd=folder, env=env, stdin=subprocess.DEVNULL, stdout=sys.stdout.fileno(), stderr=subprocess.STDOUT
        )
        return f"http://127.0.0.1:{port}"

    def _wait_healthy(self) -> None:
        deadline = time.monotonic() + self.config.openenv_ready_s
        last = ""
        while time.monotonic() < deadline:
            if self._server is not None and self._server.poll() is not None:
                raise RuntimeError(
                    f"the OpenEnv server exited with code {self._server.returncode} before it was ready "
                    "(its output is above in this log)"
                )
            try:
                _get_json(f"{self._base_url}/health", 5)
                return
            except (OSError, ValueError) as exc:
                last = str(exc)
            time.sleep(0.2)
        raise RuntimeError(
            f"the OpenEnv server at {self._base_url} did not answer /health in {self.config.openenv_ready_s:g} s: {last}"
        )

    async def setup(self) -> None:
        if self.config.openenv_url:
            self._base_url = self.config.openenv_url.rstrip("/")
        elif self.config.openenv_dir:
            self._base_url = await asyncio.to_thread(self._serve_folder, self.config.openenv_dir)
        else:
            raise ValueError("set openenv_dir (select openenv:<name>) or openenv_url")
        await asyncio.to_thread(self._wait_healthy)
        schema = await asyncio.to_thread(_get_json, f"{self._base_url}/schema", 30)
        action = schema.get("action") if isinstance(schema, dict) else None
        if not isinstance(action, dict):
            raise RuntimeError(f"{self._base_url}/schema has no action schema")
        self._schema = action
        log.info("OpenEnv at %s ready; action schema %s", self._base_url, json.dumps(action)[:300])
        self._pool.append(self._make())

    def _make(self) -> OpenEnvSession:
        ws_url = "ws" + self._base_url.removeprefix("http") + "/ws"
        session = OpenEnvSession(ws_url, self._schema, self.config.openenv_session_wait_s)
        self._sessions.append(session)
        return session

    def close_sessions(self) -> None:
        for session in self._sessions:
            session.close()
        if self._server is not None and self._server.poll() is None:
            self._server.terminate()
            try:
                self._server.wait(10)
            except subprocess.TimeoutExpired:
                self._server.kill()


if __name__ == "__main__":
    OpenEnvEnv.cli()
