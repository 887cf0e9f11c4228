"""Shared bits of the inference-test tests."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

# The bundled environment the tests smoke-test (no extra environment folders needed).
ENV_NAME = "arithmetic"
ENV_PATHS: list[Path] = []


async def read_until_done(client: Any, uri: str, timeout_s: float = 600.0) -> dict[str, Any]:
    """Read a test resource until the test has ended (a readiness probe with a deadline)."""
    import anyio

    deadline = time.monotonic() + timeout_s
    while True:
        contents = (await client.read_resource(uri)).contents
        data = json.loads(contents[0].text)
        if data["state"] != "running":
            return data
        if time.monotonic() > deadline:
            raise AssertionError(f"{uri} still running after {timeout_s} s: {data['message']}")
        await anyio.sleep(1.0)
