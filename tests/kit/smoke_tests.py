"""Shared bits of the inference-test tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.kit.wait import wait_for_async

# The bundled environment the tests smoke-test (no extra environment folders needed).
ENV_NAME = "arithmetic"
ENV_PATHS: list[Path] = []


async def read_until_done(client: Any, uri: str, timeout_s: float = 600.0) -> dict[str, Any]:
    """Read a test resource until the test has ended (a readiness probe with a deadline)."""
    last: dict[str, Any] = {}

    async def ended() -> dict[str, Any] | None:
        contents = (await client.read_resource(uri)).contents
        last.update(json.loads(contents[0].text))
        return dict(last) if last["state"] != "running" else None

    try:
        return await wait_for_async(ended, timeout_s, f"{uri} to end", interval=1.0)
    except AssertionError as exc:
        raise AssertionError(f"{uri} still running after {timeout_s} s: {last.get('message')}") from exc
