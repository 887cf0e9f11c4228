"""Rollouts of a verifiers v1 taskset, run in the verifiers family interpreter (never mcp-rl's).

    <verifiers venv>/bin/python verifiers_worker.py

It imports nothing of mcp_rl (whose dependencies are not in that venv) and speaks JSON lines:
one request a line on stdin, one answer a line on stdout (logs go to stderr).

    {"op": "describe", "taskset": ID, "config": {...}}
        -> {"ok": true, "taskset": ID, "class": NAME, "infinite": BOOL, "fields": [{name, default, description}]}
    {"op": "rollouts", "taskset": ID, "config": {...}, "start": I, "count": C, "n": N,
     "base_url": URL, "model": NAME, "renderer_model": PATH, "api_key_var": NAME or null, "sampling": {...}}
        -> {"ok": true, "episodes": [{"task": I, "ok": BOOL, "error": TEXT, "reward": R, "prompt": TEXT,
             "reply": TEXT, "turns": [{"token_ids": [...], "mask": [...], "logprobs": [...]}]}]}

Rollouts go through the taskset's default harness (the null harness for a plain taskset) on
the local subprocess runtime (verifiers' default is Prime's remote sandbox), against
`base_url`'s token-in `/inference/v1/generate` (verifiers' TrainClient), so every turn comes
back with the token ids and logprobs that were sampled.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import traceback
from typing import Any

# This file runs only in the verifiers interpreter (mcp-rl's own never imports it).
from verifiers.v1.clients import ModelContext
from verifiers.v1.configs.client import TrainClientConfig
from verifiers.v1.types import SamplingConfig
from verifiers.v1.utils.loaders import load_environment, resolve_env_config

NO_KEY_VAR = "MCP_RL_VERIFIERS_NO_KEY"


def _env_config(taskset: str, config: dict[str, Any]) -> Any:

    # Narrowed to the env's own config type (the single-agent env's has `agent`), and the
    # taskset's config to its own type (else its fields, `seed` say, are unknown).
    return resolve_env_config(
        {
            "taskset": {"id": taskset, **config},
            "agent": {"runtime": {"type": "subprocess"}},
        }
    )


def describe(request: dict[str, Any]) -> dict[str, Any]:

    env = load_environment(_env_config(request["taskset"], request.get("config") or {}))
    taskset = env.taskset
    cfg = taskset.config
    fields = []
    for name, info in type(cfg).model_fields.items():
        if name in ("id", "task", "system_prompt"):
            continue
        value = getattr(cfg, name)
        fields.append(
            {
                "name": name,
                "default": value if isinstance(value, (int, float, str, bool)) or value is None else str(value),
                "description": info.description or "",
            }
        )
    return {
        "ok": True,
        "taskset": request["taskset"],
        "class": type(taskset).__name__,
        "infinite": bool(getattr(taskset, "INFINITE", False)),
        "fields": fields,
    }


def _turns(trace: Any) -> list[dict[str, Any]]:
    turns = []
    for branch in trace.branches:
        if not branch.trainable:
            continue
        turns.append({"token_ids": branch.token_ids, "mask": branch.sampled_mask, "logprobs": branch.logprobs})
    return turns


class Rollouts:
    """Loaded environments, each serving (its interception server up) until the worker ends:
    the next request of the same taskset and config pays for neither again."""

    def __init__(self) -> None:
        self.stack = contextlib.AsyncExitStack()
        self.envs: dict[str, Any] = {}

    async def env(self, taskset: str, config: dict[str, Any]) -> Any:

        key = json.dumps([taskset, config], sort_keys=True)
        if key not in self.envs:
            env = load_environment(_env_config(taskset, config))
            await self.stack.enter_async_context(env.serving())
            self.envs[key] = env
        return self.envs[key]

    async def run(self, request: dict[str, Any]) -> dict[str, Any]:

        env = await self.env(request["taskset"], request.get("config") or {})
        tasks = list(env.taskset.skip(int(request["start"])).take(int(request["count"])))
        client = TrainClientConfig(
            base_url=request["base_url"].rstrip("/") + "/v1",
            # The variable holding the endpoint's key (a smoke test's gateway token), else one
            # nobody sets: verifiers' default, PRIME_API_KEY, would send the user's Prime key.
            api_key_var=request.get("api_key_var") or NO_KEY_VAR,
            renderer_model_name=request.get("renderer_model"),
            # The chat program always offers tools; renderers' default (chat-template) renderer
            # refuses tools without a parser. Models outside renderers' map get Qwen3's
            # <tool_call> parser unless the request names a renderer.
            renderer=request.get("renderer") or {"name": "default", "tool_parser": "qwen3"},
        )
        sampling = SamplingConfig(**(request.get("sampling") or {}))
        ctx = ModelContext(client=client, model=request["model"], sampling=sampling)
        n = int(request.get("n", 1))
        slots = [(i, slot) for i, task in enumerate(tasks) for slot in env.slots(task, n)]
        episodes = await asyncio.gather(*(env.run_slot(slot, ctx) for _, slot in slots), return_exceptions=True)
        out: list[dict[str, Any]] = []
        for (i, _slot), episode in zip(slots, episodes, strict=True):
            index = int(request["start"]) + i
            if isinstance(episode, BaseException):
                out.append({"task": index, "ok": False, "error": f"{type(episode).__name__}: {episode}"})
                continue
            trace = episode.traces[-1] if episode.traces else None
            error = ""
            if not episode.ok or trace is None or not trace.ok:
                last = (trace.last_error if trace is not None else None) or episode.last_error
                error = (
                    f"{getattr(last, 'type', '')}: {getattr(last, 'message', last)}" if last else "the episode failed"
                )
            out.append(
                {
                    "task": index,
                    "ok": not error,
                    "error": error,
                    "reward": float(trace.reward) if trace is not None else 0.0,
                    "prompt": str(tasks[i].data.prompt or ""),
                    "reply": trace.last_reply if trace is not None else "",
                    "turns": _turns(trace) if trace is not None and not error else [],
                }
            )
        return {"ok": True, "episodes": out}


async def serve() -> None:
    """Answer requests until stdin ends, on one event loop (the envs keep serving on it)."""
    loop = asyncio.get_running_loop()
    rollouts = Rollouts()
    try:
        while True:
            line = await loop.run_in_executor(None, sys.stdin.readline)
            if not line:
                return
            if not line.strip():
                continue
            try:
                request = json.loads(line)
                if request.get("op") == "describe":
                    answer = describe(request)
                elif request.get("op") == "rollouts":
                    answer = await rollouts.run(request)
                else:
                    answer = {"ok": False, "error": f"unknown op {request.get('op')!r}"}
            except Exception as exc:
                traceback.print_exc(file=sys.stderr)
                answer = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
            sys.stdout.write(json.dumps(answer) + "\n")
            sys.stdout.flush()
    finally:
        await rollouts.stack.aclose()


def main() -> int:
    asyncio.run(serve())
    return 0


if __name__ == "__main__":
    sys.exit(main())
