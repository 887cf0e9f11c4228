"""The loopback Tinker for tests (issue 38): the fake service of tests/fakes/tinker_server.py
driven through the REAL tinker SDK, alone (`serve` + `make_backend`) or under a whole Trainer
run against the real run-api (`trainer_on_the_wire`). The tiny tokenizer it serves is the
`tiny_tokenizer` fixture (tests/conftest.py)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from mcp_rl.runconfig import RunConfig
from mcp_rl.settings import Settings
from mcp_rl.trainer.backends.base import TrainingExample
from mcp_rl.trainer.backends.tinker import TinkerBackend
from mcp_rl.trainer.loop import Trainer
from tests.fakes.tinker_server import API_KEY, Latency, TinkerServer, TinkerWire
from tests.kit.run_harness import child_env, http_ok, start, venv_bin
from tests.kit.runs import TEST_HELD_OUT_LIMIT, arithmetic_run_config
from tests.kit.wait import wait_for, wait_for_async

MODEL = "Qwen/Qwen3-8B"


def serve(tokenizer: str, **latency: float) -> TinkerServer:
    """The fake service (a context manager) serving `tokenizer`, with the given `Latency`."""
    return TinkerServer(TinkerWire(tokenizer_id=tokenizer, latency=Latency(**latency)))


def make_backend(server: TinkerServer, *, api_key: str = API_KEY, rank: int = 16, **kwargs: Any) -> TinkerBackend:
    import tinker  # the SDK takes seconds to import: only the tests that talk to the fake pay for it

    service = tinker.ServiceClient(base_url=server.base_url, api_key=api_key)
    return TinkerBackend(service, base_model=MODEL, lora_rank=rank, **kwargs)


def example(
    input_tokens: list[int], advantage: float, logprobs: list[float] | None, prompt: int = 1
) -> TrainingExample:
    """A sequence whose tokens from position `prompt` on are trained with `advantage`."""
    trained = [t >= prompt for t in range(len(input_tokens))]
    return TrainingExample(
        input_tokens=input_tokens,
        target_tokens=[t + 1 for t in input_tokens],
        advantages=[advantage if k else 0.0 for k in trained],
        sampling_logprobs=logprobs,
        trained=trained,
    )


def scored_group(scores: list[float]) -> dict[str, Any]:
    """A group as an environment posts it to run-api's /scored_data: one 2-token answer per score."""
    prompt = [11, 12, 13, 14]
    tokens, masks, lps = [], [], []
    for i, _ in enumerate(scores):
        out = [20 + i, 1]
        tokens.append(prompt + out)
        masks.append([-100] * len(prompt) + out)
        lps.append([1.0] * len(prompt) + [-0.5, -0.1])
    return {"tokens": tokens, "masks": masks, "scores": scores, "inference_logprobs": lps}


def tinker_run_config(tmp_path: Path, tokenizer: str, **kwargs: Any) -> RunConfig:
    """An arithmetic run on the Tinker backend in `tmp_path`/run (kwargs: `arithmetic_run_config`'s)."""
    kwargs.setdefault("held_out_limit", TEST_HELD_OUT_LIMIT)
    return arithmetic_run_config(tmp_path / "run", Path(tokenizer), backend="tinker", base_model=MODEL, **kwargs)


@dataclass
class WiredRun:
    """A Trainer run on the loopback Tinker, registered with run-api."""

    config: RunConfig
    settings: Settings
    wire: TinkerWire
    task: asyncio.Task[int]
    http: httpx.AsyncClient

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.config.ports.api}"

    @property
    def inference_url(self) -> str:
        return f"http://127.0.0.1:{self.config.ports.inference}"

    async def registered(self) -> bool:
        return (await self.http.get(f"{self.api_url}/info")).json().get("batch_size", -1) != -1

    async def post(self, *groups: dict[str, Any]) -> None:
        for group in groups:
            (await self.http.post(f"{self.api_url}/scored_data", json=group)).raise_for_status()

    async def finish(self, timeout: float = 120) -> int:
        """The trainer's exit code."""
        return await asyncio.wait_for(self.task, timeout)


@asynccontextmanager
async def trainer_on_the_wire(
    config: RunConfig, home: Path, tokenizer: str, settings_env: dict[str, str] | None = None
) -> AsyncIterator[WiredRun]:
    """run-api (a process, its log in `home`), the loopback Tinker and an in-process Trainer on
    it, yielded once the trainer has registered; all stopped on exit. The backend is made as
    `TinkerBackend.from_settings` makes it (checkpoint TTL from the settings, `settings_env`)."""
    argv = [venv_bin("run-api"), "--host", "127.0.0.1", "--port", str(config.ports.api)]
    api = start("api", argv, home / "api.log", child_env(home), home)
    try:
        with serve(tokenizer) as server:
            wait_for(lambda: http_ok(f"http://127.0.0.1:{config.ports.api}/status"), 60, "run-api", watch=[api])
            settings = Settings.from_env({**child_env(home), **(settings_env or {})})
            trainer = Trainer(
                config, settings, lambda c, s: make_backend(server, checkpoint_ttl_s=s.tinker_checkpoint_ttl_s)
            )
            task = asyncio.create_task(trainer.run())
            try:
                async with httpx.AsyncClient() as http:
                    run = WiredRun(config, settings, server.wire, task, http)
                    await wait_for_async(run.registered, 60, "the trainer to register with run-api", task=task)
                    yield run
            finally:
                task.cancel()  # a test that failed half-way leaves no trainer behind (a no-op once done)
    finally:
        api.stop()
