"""An OpenEnv environment end to end: a guess-the-number `Environment` written for this test
(tests/fixtures/openenv_guess, the `openenv init` layout) served by openenv==0.10.0's
`create_app` in the openenv interpreter mcp-rl makes; listed, smoke-tested against the local
model, trained 4 local steps with held-out figures (its own evaluate() on fixed seeds, run by
mcp-rl on the base and on the last step's weights, paired seed by seed), and its server stopped
with the run.

Real parts: the stdio MCP server, the supervisor, Atropos run-api, the trainer with the embedded
model, uvicorn serving the environment in its own venv, WebSocket sessions between them.
The interpreter lives in ~/.cache/mcp-rl-ci/families (outside the checkout; pip's cache too), so
only a machine's first run pays for the install.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import psutil
import pytest
from mcp import Client

from tests.conftest import FIXTURES, stdio_params
from tests.kit.mcp import build_family, ok, run_to_end
from tests.kit.smoke_tests import read_until_done
from tests.kit.wait import WaitTimeout, wait_for

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

FOLDER = (FIXTURES / "openenv_guess").resolve()
NAME = "openenv:guess_number"
RUN_DEADLINE_S = 900.0
SHORT = {
    "total_steps": 4,
    "group_size": 4,
    "batch_size": 8,
    "num_envs": 4,
    "max_tokens_per_turn": 4,
    "max_turns": 4,
    "eval_episodes": 8,
}


def _server_pids() -> list[int]:
    """uvicorn processes serving the fixture folder (whoever started them)."""
    found = []
    for proc in psutil.process_iter(["cmdline", "cwd"]):
        try:
            if "uvicorn" in " ".join(proc.info["cmdline"] or []) and proc.info["cwd"] == str(FOLDER):
                found.append(proc.pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


@pytest.fixture(scope="module")
def families_dir() -> Path:
    return build_family("openenv")


async def test_openenv_folder_listed_played_trained_and_stopped(home: Path, families_dir: Path) -> None:
    params = stdio_params(home, MCP_RL_ENV_PATHS=str(FOLDER), MCP_RL_FAMILIES_DIR=str(families_dir))
    async with Client(params) as client:
        listed = await ok(client, "rl_list_environments", {})
        assert NAME in [e["name"] for e in listed["environments"]]
        selected = await ok(client, "rl_select_environment", {"name": NAME})
        assert selected["class_name"] == "OpenEnvEnv" and selected["preset"] == {"openenv_dir": str(FOLDER)}
        for field, value in SHORT.items():
            await ok(client, "rl_edit_config", {"field": field, "value": value})

        # Played: whole episodes against the local model (Atropos process mode).
        answer = await client.call_tool("rl_test_inference", {"num_steps": 1, "group_size": 4, "models": ["local"]})
        assert not answer.is_error, answer.content
        tested = answer.structured_content
        if tested["state"] == "running":
            tested = await read_until_done(client, tested["resource"], timeout_s=600)
        assert tested["state"] == "completed", tested["message"]
        local = tested["models_tested"][0]
        assert local["state"] == "succeeded", (local.get("error"), local.get("log_tail"))
        scores = [s for step in local["steps"] for s in step["scores"]]
        assert len(scores) == 4 and set(scores) <= {0.0, 1.0}
        assert "guess" in local["samples"][0]["prompt"].lower()
        assert not _server_pids(), "the smoke test's server outlived it"

        # Trained: 4 local steps, held-out evaluation on fixed seeds.
        started = await ok(client, "rl_start_training")
        run_id = started["run_id"]
        seen: list[int] = []
        status = await run_to_end(client, run_id, RUN_DEADLINE_S, each=lambda: seen.extend(_server_pids()))
        saw_server = bool(seen)
        assert status["status"] == "completed", status
        assert status["metrics"]["step"] == 4
        results = await ok(client, "rl_get_results", {"run_id": run_id})
    assert saw_server
    run_dir = Path(results["run_dir"])
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    # Step 0 is the base's held-out evaluation on fixed seeds, before any training step.
    assert [s["step"] for s in lines] == [0, 1, 2, 3, 4]
    assert lines[0]["eval/n"] == lines[-1]["eval/n"] == SHORT["eval_episodes"]
    held_out = results["held_out"]
    assert held_out is not None and (held_out["n"], held_out["base_step"], held_out["step"]) == (8, 0, 4), held_out
    assert held_out["paired"] and held_out["trained_score"] is not None, held_out
    steps = lines[1:]
    for step in steps:
        assert step["batch/sequences"] == 8 and step["tokens/trained"] > 0
    env_lines = [json.loads(line) for line in (run_dir / "env_metrics.jsonl").read_text().splitlines()]
    played = [m for m in env_lines if "gem/episode_return" in m]
    assert played, env_lines
    for m in played:
        assert 0.0 <= m["gem/success_rate"] <= 1.0 and 1.0 <= m["gem/turns_per_episode"] <= 10.0
    # The environment's server ended with the run.
    with contextlib.suppress(WaitTimeout):  # the assertion below names what is left
        wait_for(lambda: not _server_pids(), 30, "the environment's server to end", interval=0.2)
    assert not _server_pids()
