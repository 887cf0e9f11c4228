"""Drives Codex's own app server (`codex app-server`, JSON-RPC over stdio; no login needed to
reach MCP servers) with CODEX_HOME holding the README's `config.toml`: the status of the `rl`
server (connected, its tools), then one tool call through Codex's MCP client.

Usage: python codex_driver.py CODEX_BINARY. Prints one JSON object per step. Standard library only.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from typing import Any

DEADLINE_S = 240


class AppServer:
    def __init__(self, argv: list[str]) -> None:
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.replies: dict[int, dict[str, Any]] = {}
        self.cond = threading.Condition()
        self.next_id = 0
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                message = json.loads(line)
            except ValueError:
                continue
            if "id" in message and ("result" in message or "error" in message):
                with self.cond:
                    self.replies[message["id"]] = message
                    self.cond.notify_all()

    def send(self, method: str, params: Any = None, *, notify: bool = False) -> dict[str, Any] | None:
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        if not notify:
            self.next_id += 1
            message["id"] = self.next_id
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(message) + "\n")
        self.proc.stdin.flush()
        if notify:
            return None
        deadline = time.monotonic() + DEADLINE_S
        with self.cond:
            while message["id"] not in self.replies:
                left = deadline - time.monotonic()
                if left <= 0 or self.proc.poll() is not None:
                    raise RuntimeError(f"no answer to {method}")
                self.cond.wait(min(left, 1.0))
            return self.replies.pop(message["id"])

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def emit(step: str, value: Any) -> None:
    print(json.dumps({"step": step, "result": value}), flush=True)


def main(codex: str) -> int:
    server = AppServer([codex, "app-server"])
    try:
        emit("initialize", server.send("initialize", {"clientInfo": {"name": "mcp-rl-tests", "version": "0"}}))
        server.send("initialized", notify=True)
        status = server.send("mcpServerStatus/list", {})
        servers = ((status or {}).get("result") or {}).get("data") or []
        rl = next((s for s in servers if s.get("name") == "rl"), None)
        emit("status", {"raw_keys": sorted((status or {}).get("result") or {}), "rl": rl})
        thread = server.send("thread/start", {})
        thread_id = (((thread or {}).get("result") or {}).get("thread") or {}).get("id")
        emit("thread", {"id": thread_id, "error": (thread or {}).get("error")})
        call = server.send(
            "mcpServer/tool/call",
            {"server": "rl", "threadId": thread_id, "tool": "rl_list_runs", "arguments": {}},
        )
        emit("call", call)
    finally:
        server.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
