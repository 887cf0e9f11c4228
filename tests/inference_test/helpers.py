"""Shared bits of the inference-test tests."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any


# The bundled environment the tests smoke-test. MCP_RL_TEST_ENV / MCP_RL_TEST_ENV_PATHS exist
# only to point these tests at another environment while developing.
ENV_NAME = os.environ.get("MCP_RL_TEST_ENV", "arithmetic")
ENV_PATHS = [Path(p) for p in os.environ.get("MCP_RL_TEST_ENV_PATHS", "").split(os.pathsep) if p]


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
