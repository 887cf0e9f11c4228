"""The real thing, no fakes: `arithmetic` smoke-tested against the embedded default model.

The MCP server runs as a stdio subprocess driven by a real MCP client, with no OpenRouter key, so
rl_test_inference picks the local model: the worker starts the project's inference server on a
free port, runs Atropos process mode against it, scores with the environment's own reward, and
stops the server afterwards.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import psutil
import pytest
from mcp import Client

from mcp_rl.inference_test.models import LOCAL_SERVER_FILE, WorkerRecord
from tests.conftest import stdio_params
from tests.kit.smoke_tests import ENV_NAME, ENV_PATHS, read_until_done

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

STEPS, GROUP = 2, 4


async def test_arithmetic_against_the_local_model_over_stdio(home: Path) -> None:
    extra = {"MCP_RL_ENV_PATHS": ":".join(map(str, ENV_PATHS))} if ENV_PATHS else {}
    progress: list[float] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append(value)

    async with Client(stdio_params(home, **extra)) as client:
        selected = await client.call_tool("rl_select_environment", {"name": ENV_NAME})
        assert not selected.is_error, selected.content
        answer = await client.call_tool(
            "rl_test_inference", {"num_steps": STEPS, "group_size": GROUP}, progress_callback=on_progress
        )
        assert not answer.is_error, answer.content
        result = answer.structured_content
        if result["state"] == "running":  # slower than the tool's 80 s: read it later, as an agent would
            assert result["test_id"] in result["message"]
            result = await read_until_done(client, result["resource"])
        local = result["models_tested"][0]
        model_view = json.loads((await client.read_resource(local["resources"]["result"])).contents[0].text)
        log_tail = (await client.read_resource(local["resources"]["log"] + "?tail=5")).contents[0].text

    assert result["state"] == "completed", result["message"]
    assert [m["model"] for m in result["models_tested"]] == ["local"]
    assert local["state"] == "succeeded", (local["error"], local["log_tail"])
    # Real scores from the environment's reward over the real model's completions.
    assert local["steps_tested"] == STEPS and local["total_completions"] == STEPS * GROUP
    scores = [s for step in local["steps"] for s in step["scores"]]
    assert len(scores) == STEPS * GROUP
    assert local["correct_completions"] == sum(1 for s in scores if s > 0)
    assert local["accuracy"] == round(local["correct_completions"] / (STEPS * GROUP), 4)
    assert local["min_score"] == min(scores) and local["max_score"] == max(scores)
    assert len(local["samples"]) == 2
    for sample in local["samples"]:
        assert sample["prompt"] and re.search(r"\d", sample["prompt"])  # an arithmetic question
        assert sample["completion"].strip()  # what the model actually said
    assert result["summary"]["environment_working"] is True
    assert result["summary"]["best_model"] == "local"
    # Atropos's own outputs, in this test's own folder.
    test_dir = home / "tests" / result["test_id"]
    assert Path(local["output_file"]).parent == test_dir / "local"
    assert Path(local["output_file"]).is_file() and Path(local["html_file"]).is_file()
    assert model_view["state"] == "succeeded" and log_tail
    # The inference server started for the test is gone.
    server = WorkerRecord.model_validate_json((test_dir / LOCAL_SERVER_FILE).read_text())
    assert not psutil.pid_exists(server.pid) or psutil.Process(server.pid).create_time() != server.create_time
    assert progress and progress == sorted(progress)
