"""A verifiers v1 taskset end to end: a procedural INFINITE taskset written for this test
(tests/fixtures/verifiers_tasks/small_sums), rolled out through verifiers' null harness in the
interpreter mcp-rl makes with verifiers==0.4.0, against the trainer's /inference/v1/generate:
listed, smoke-tested against the local model (token-in through the test's gateway), and trained 4
local steps with paired held-out figures from its own evaluate().

Real parts: the stdio MCP server, the supervisor, Atropos run-api, the trainer with the embedded
model, verifiers' own Env/harness/TrainClient (and its chat program, synced by uv from the
package index by the uv installed beside verifiers, on an empty HOME with no uv on PATH) in its
own venv. The venv lives in ~/.cache/mcp-rl-ci/families (outside the
checkout), so only a machine's first run pays for the install.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from mcp import Client

from tests.conftest import FIXTURES, stdio_params
from tests.kit.mcp import build_family, ok, run_to_end
from tests.kit.smoke_tests import read_until_done

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

TASKSETS = (FIXTURES / "verifiers_tasks").resolve()
NAME = "verifiers:small_sums"
RUN_DEADLINE_S = 1200.0
# mcp-rl runs the taskset's evaluate() on the base (step 0) and on the last step's weights.
# Operands up to 3: the prompt's worked examples hold most of the sums, so a 135M model's echoes
# are right often enough that most groups carry signal and the trained path is exercised.
SHORT = {
    "total_steps": 4,
    "group_size": 4,
    "batch_size": 8,
    "max_tokens": 8,
    "eval_items": 8,
    "taskset_config": '{"high": 3}',
}


@pytest.fixture(scope="module")
def families_dir() -> Path:
    return build_family("verifiers")


async def test_verifiers_taskset_listed_and_trained(home: Path, families_dir: Path, tmp_path: Path) -> None:
    # A fresh machine: an empty HOME (no ~/.local/bin, no user pip.conf) and no uv on PATH. The null
    # harness syncs its chat program with the uv installed beside verifiers, from the index and with
    # the CA bundle pip's configuration names (mcp_rl.environments.uv_setup): no SSL_CERT_FILE given.
    user_home = tmp_path / "user-home"
    user_home.mkdir()
    params = stdio_params(
        home, MCP_RL_ENV_PATHS=str(TASKSETS), MCP_RL_FAMILIES_DIR=str(families_dir), HOME=str(user_home)
    )
    assert params.env is not None
    params.env["PATH"] = os.pathsep.join(
        p for p in os.environ.get("PATH", "").split(os.pathsep) if p and not (Path(p) / "uv").exists()
    )
    async with Client(params) as client:
        listed = await ok(client, "rl_list_environments", {})
        assert NAME in [e["name"] for e in listed["environments"]]
        selected = await ok(client, "rl_select_environment", {"name": NAME})
        assert selected["class_name"] == "VerifiersEnv"
        for field, value in SHORT.items():
            await ok(client, "rl_edit_config", {"field": field, "value": value})

        # Smoke-tested: one group against the local model, token-in through the test's gateway.
        tested = await ok(client, "rl_test_inference", {"num_steps": 1, "group_size": 4, "models": ["local"]})
        if tested["state"] == "running":
            tested = await read_until_done(client, tested["resource"], timeout_s=600)
        assert tested["state"] == "completed", tested["message"]
        local = tested["models_tested"][0]
        assert local["state"] == "succeeded", (local.get("error"), local.get("log_tail"))
        scores = [s for step in local["steps"] for s in step["scores"]]
        assert len(scores) == 4 and set(scores) <= {0.0, 1.0} and local["usage"]["requests"] >= 4

        started = await ok(client, "rl_start_training")
        run_id = started["run_id"]
        status = await run_to_end(client, run_id, RUN_DEADLINE_S)
        assert status["status"] == "completed", status
        assert status["metrics"]["step"] == 4
        results = await ok(client, "rl_get_results", {"run_id": run_id})
    run_dir = Path(results["run_dir"])
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    # Held-out figures from the taskset's own evaluate() (greedy, tasks seeded apart from training),
    # before step 1 and after the last, paired task by task.
    assert [s["step"] for s in lines] == [0, 1, 2, 3, 4]
    assert lines[0]["eval/n"] == lines[-1]["eval/n"] == SHORT["eval_items"]
    held_out = results["held_out"]
    assert held_out is not None and (held_out["n"], held_out["base_step"], held_out["step"]) == (8, 0, 4)
    assert held_out["paired"] and held_out["test"] and held_out["trained_score"] is not None, held_out
    steps = lines[1:]
    for step in steps:
        assert step["batch/sequences"] == 8 and step["tokens/trained"] > 0
        # A step whose groups carried signal trained on the logprobs each turn was sampled with
        # (through /inference/v1/generate); a step without signal trains nothing (its groups shown).
        if step["batch/trained_sequences"] > 0:
            assert "logprobs/diff" in step and abs(step["logprobs/diff"]) < 0.05, step
        else:
            assert step["batch/zero_signal_groups"] == 2, step
    env_lines = [json.loads(line) for line in (run_dir / "env_metrics.jsonl").read_text().splitlines()]
    assert any("verifiers/mean_reward" in m for m in env_lines), env_lines
    assert max(m.get("verifiers/dropped_episodes", 0) for m in env_lines) == 0, env_lines
    trained = sum(s["batch/trained_sequences"] for s in steps)
    assert trained > 0, steps
    assert "high: 3" in (run_dir / "run.yaml").read_text()
    # Nothing outside mcp-rl's folders: no uv (or anything else) installed into ~/.local/bin.
    assert not (user_home / ".local" / "bin").exists() or not list((user_home / ".local" / "bin").iterdir())
    print(
        f"held-out: {held_out['base_score']} -> {held_out['trained_score']} (n={held_out['n']}); trained sequences {trained}"
    )
