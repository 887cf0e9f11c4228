"""The trainer's Atropos client against the real run-api: batches, deadlines, clear failures."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from mcp_rl.trainer.atropos_client import AtroposClient, AtroposError
from tests.kit.run_harness import Proc, child_env, free_port, http_ok, start, venv_bin
from tests.kit.wait import wait_for


@pytest.fixture
def api(tmp_path: Path) -> Iterator[str]:
    port = free_port()
    proc: Proc = start(
        "api",
        [venv_bin("run-api"), "--host", "127.0.0.1", "--port", str(port)],
        tmp_path / "api.log",
        child_env(tmp_path),
        tmp_path,
    )
    try:
        wait_for(lambda: http_ok(f"http://127.0.0.1:{port}/status"), 60, "run-api", watch=[proc])
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.stop()


REGISTRATION = {
    "wandb_group": "g",
    "wandb_project": "p",
    "batch_size": 2,
    "max_token_len": 64,
    "checkpoint_dir": "/tmp/x",
    "save_checkpoint_interval": 0,
    "starting_step": 0,
    "num_steps": 3,
}


def _group(score: float) -> dict:
    return {"tokens": [[1, 2, 3], [1, 2, 4]], "masks": [[-100, 2, 3], [-100, 2, 4]], "scores": [score, 0.0]}


@pytest.mark.anyio
async def test_register_and_receive_a_batch(api: str) -> None:
    client = AtroposClient(api, unreachable_timeout_s=5, batch_wait_timeout_s=10)
    try:
        assert "uuid" in await client.register(REGISTRATION)
        httpx.post(f"{api}/scored_data", json=_group(1.0)).raise_for_status()
        batch = await client.get_batch()
        assert batch is not None and len(batch) == 1
        assert batch[0]["scores"] == [1.0, 0.0]
        assert httpx.get(f"{api}/status").json()["current_step"] == 1
    finally:
        await client.aclose()


@pytest.mark.anyio
async def test_no_batch_fails_after_the_deadline_with_a_clear_message(api: str) -> None:
    client = AtroposClient(api, unreachable_timeout_s=5, batch_wait_timeout_s=1.5, poll_interval_s=0.1)
    try:
        await client.register(REGISTRATION)
        started = time.monotonic()
        with pytest.raises(AtroposError, match="no batch from the environment .* logs/env.log"):
            await client.get_batch()
        assert time.monotonic() - started < 10
    finally:
        await client.aclose()


@pytest.mark.anyio
async def test_unregistered_api_is_an_error_not_an_endless_wait(api: str) -> None:
    client = AtroposClient(api, unreachable_timeout_s=5, batch_wait_timeout_s=30)
    try:
        with pytest.raises(AtroposError, match="Trainer not registered"):
            await client.get_batch()
    finally:
        await client.aclose()


@pytest.mark.anyio
async def test_unreachable_api_fails_after_the_deadline() -> None:
    client = AtroposClient(f"http://127.0.0.1:{free_port()}", unreachable_timeout_s=1.0, poll_interval_s=0.1)
    started = time.monotonic()
    try:
        with pytest.raises(AtroposError, match="has not answered .* logs/api.log"):
            await client.get_batch()
    finally:
        await client.aclose()
    assert time.monotonic() - started < 10


@pytest.mark.anyio
async def test_the_batch_is_polled_finely_with_a_bounded_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    """The trainer idles until it sees its batch: the first looks come within tens of ms and
    the pauses never grow past half a second (a 4 s backoff cost every local step seconds)."""
    import mcp_rl.trainer.atropos_client as module

    client = AtroposClient("http://127.0.0.1:9")
    answers = iter([{"batch": None}] * 12 + [{"batch": [{"tokens": [[1]]}]}])
    pauses: list[float] = []

    async def fake_request(method: str, path: str, stop: object, **kwargs: object) -> object:
        return next(answers)

    async def fake_stopped(stop: object, seconds: float) -> bool:
        pauses.append(seconds)
        return False

    monkeypatch.setattr(client, "_request", fake_request)
    monkeypatch.setattr(module, "_stopped", fake_stopped)
    try:
        assert await client.get_batch() == [{"tokens": [[1]]}]
    finally:
        await client.aclose()
    assert len(pauses) == 12
    assert pauses[0] <= 0.05 and pauses == sorted(pauses) and max(pauses) == 0.5
