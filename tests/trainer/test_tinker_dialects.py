"""The Tinker backend in both SDK dialects, through the REAL SDKs at the wire of the loopback fake:
0.38 (installed; hosted Tinker) against the fake speaking today's Tinker, and 0.25 (installed from
PyPI on first use into a folder of its own, as a run's trainer gets it) against the fake speaking
as a self-hosted server (SkyRL's Tinker API) does. Each backend runs in a process of its own
(tests/trainer/tinker_dialect_scenario.py): sampling, a training step, checkpoints, keep, finish
and resume."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from mcp_rl.settings import Settings
from mcp_rl.supervisor import launch, tinker_sdk
from tests.conftest import make_env
from tests.fakes.tinker_server import API_KEY, TinkerServer, TinkerWire
from tests.kit.runs import run_config

REPO = Path(__file__).resolve().parents[2]
SCENARIO = Path(__file__).with_name("tinker_dialect_scenario.py")
# Shared by test sessions (pip install of one small wheel, once per machine).
SDK_CACHE = Path(os.path.expanduser("~/.cache/mcp-rl-ci/tinker-sdk"))


@pytest.fixture(scope="module")
def sdk_025() -> Path:
    path = tinker_sdk.sdk_path("0.25", SDK_CACHE)
    assert path is not None and (path / "tinker").is_dir()
    return path


def scenario(server: TinkerServer, sdk: Path | None, home: Path) -> tuple[dict[str, Any] | None, str]:
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": os.pathsep.join(p for p in (str(sdk or ""), str(REPO)) if p),
    }
    done = subprocess.run(
        [sys.executable, str(SCENARIO), server.base_url, API_KEY, str(home)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
        check=False,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    return (json.loads(lines[-1][len("RESULT ") :]) if lines else None), done.stderr[-3000:]


def test_sdk_038_against_hosted_tinkers_dialect(tiny_tokenizer: str, tmp_path: Path) -> None:
    with TinkerServer(TinkerWire(tokenizer_id=tiny_tokenizer, dialect="0.38")) as server:
        result, err = scenario(server, None, tmp_path)
        wire = server.wire
    assert result is not None, err
    assert result["sdk"].startswith("0.38") and result["self_hosted"] is False
    assert len(result["sampled"]) == 2 and result["resumed_sampled"]
    # Resume is one load_weights call carrying the session (no model created first).
    assert len(wire.loads) == 1 and wire.loads[0].get("session_id") and not wire.loads[0].get("model_id")
    # The interval checkpoint was saved to expire and then kept; the sessions were finished.
    assert {ttl for _, ttl in wire.ttl_calls} == {None} and len(wire.ttl_calls) == 2
    assert any(s["ttl_seconds"] == 3600 for s in wire.saves if s.get("name") == "step_1")
    assert [s["finished"] for s in wire.sessions.values()] == ["success", "success"]


def test_sdk_025_against_a_self_hosted_servers_dialect(tiny_tokenizer: str, sdk_025: Path, tmp_path: Path) -> None:
    with TinkerServer(TinkerWire(tokenizer_id=tiny_tokenizer, dialect="0.25")) as server:
        result, err = scenario(server, sdk_025, tmp_path)
        wire = server.wire
    assert result is not None, err
    assert result["sdk"] == "0.25.0" and result["self_hosted"] is True
    assert len(result["sampled"]) == 2 and result["resumed_sampled"]
    # The server stops only where it is told to (SkyRL has no implicit EOS): every request carries
    # EOS (the tiny tokenizer's id 1), so no answer runs on to max_tokens.
    assert [s["params"].get("stop") for s in wire.samples] == [[1]] * len(wire.samples), wire.samples
    assert [len(tokens) for tokens in result["sampled"]] == [3, 3]
    # No loss metric from the server (metrics={}): the loss is the sum of the per-token losses.
    assert result["loss"] == pytest.approx(wire.forward_backward[0]["loss"], rel=1e-5)
    # Resume: weights_info, a model created, then load_weights with its model_id.
    assert len(wire.loads) == 1 and wire.loads[0].get("model_id") and not wire.loads[0].get("session_id")
    assert len(wire.created) == 2
    # No TTL on a server without the route: saved without one, and nothing to keep.
    assert wire.ttl_calls == [] and all(s.get("ttl_seconds") is None for s in wire.saves if s.get("name"))
    assert [s["finished"] for s in wire.sessions.values()] == [None, None]


def test_sdk_038_against_a_self_hosted_server_fails_where_the_issue_says(tiny_tokenizer: str, tmp_path: Path) -> None:
    """Why the dialects exist: today's SDK asserts sample_sequence_ids, which SkyRL does not send."""
    with TinkerServer(TinkerWire(tokenizer_id=tiny_tokenizer, dialect="0.25")) as server:
        result, err = scenario(server, None, tmp_path)
    assert result is None and "sample_sequence_ids" in err


def test_auto_asks_the_server_and_the_trainer_gets_that_sdk_first_on_its_path(
    tiny_tokenizer: str, sdk_025: Path, tmp_path: Path
) -> None:
    assert tinker_sdk.resolve("auto", None, None) == "0.38"  # hosted Tinker: today's SDK, nothing asked
    assert tinker_sdk.resolve("0.25", None, None) == "0.25"
    for dialect in ("0.38", "0.25"):
        with TinkerServer(TinkerWire(tokenizer_id=tiny_tokenizer, dialect=dialect)) as server:
            assert tinker_sdk.resolve("auto", server.base_url, API_KEY) == dialect
    home = tmp_path / "home"
    settings = Settings.from_env(make_env(home, TINKER_API_KEY=API_KEY, MCP_RL_TINKER_HOSTS="127.0.0.1:1"))
    config = run_config(
        tmp_path / "run", run_id="r1", backend="tinker", tinker_base_url="http://127.0.0.1:1", tinker_sdk="0.25"
    )
    (home / "tinker-sdk").mkdir(parents=True)
    os.symlink(sdk_025, home / "tinker-sdk" / sdk_025.name)
    env = launch._tinker_env(config, settings, {"PYTHONPATH": "/x"})
    assert env["PYTHONPATH"].split(os.pathsep) == [str(home / "tinker-sdk" / sdk_025.name), "/x"]
    assert env["TINKER_BASE_URL"] == "http://127.0.0.1:1"
