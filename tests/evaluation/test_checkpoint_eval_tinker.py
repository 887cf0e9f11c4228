"""A Tinker run's checkpoint evaluated against its base through the REAL tinker SDK, against the
loopback Tinker at the wire: the sampling sessions name the checkpoint's sampler path and the
base model, and the result names the path for Tinker's OpenAI-compatible endpoint."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from mcp_rl.evaluation import checkpoint_eval
from mcp_rl.run_checkpoints import TINKER_OPENAI_BASE_URL
from mcp_rl.settings import Settings
from tests.conftest import make_env
from tests.fakes.tinker_server import API_KEY
from tests.kit.runs import TEST_HELD_OUT_LIMIT, record_checkpoint, write_run_file
from tests.kit.tinker_wire import serve
from tests.kit.wait import wait_for

BASE = "Qwen/Qwen3-4B-Instruct-2507"

pytestmark = pytest.mark.timeout(180)


def test_tinker_checkpoint_against_its_base(home: Path, tiny_tokenizer: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import tinker

    with serve(tiny_tokenizer) as server:
        # The run's saved sampler weights, made on the fake through the SDK as the trainer does.
        service = tinker.ServiceClient(base_url=server.base_url, api_key=API_KEY)
        training = service.create_lora_training_client(base_model=BASE, rank=8)
        path = training.save_weights_for_sampler("step_000003").result().path
        # The detached worker inherits the key and URL from the environment, as a server's would.
        monkeypatch.setenv("TINKER_API_KEY", API_KEY)
        monkeypatch.setenv("TINKER_BASE_URL", server.base_url)
        settings = Settings.from_env(make_env(home, TINKER_API_KEY=API_KEY, TINKER_BASE_URL=server.base_url))
        # The run evaluated its first TEST_HELD_OUT_LIMIT held-out items: so does its checkpoint's evaluation.
        config = write_run_file(
            settings,
            "t1",
            base_model=BASE,
            backend="tinker",
            tokenizer_path=tiny_tokenizer,
            held_out_limit=TEST_HELD_OUT_LIMIT,
        )
        record_checkpoint(config, 3, "state", "tinker://x/weights/step_000003")
        record_checkpoint(config, 3, "sampler", path, final=True)
        sessions_before = len(server.wire.sampling_sessions)

        began = time.monotonic()
        started = checkpoint_eval.start_evaluation(settings, "t1")
        # the detached worker's result file, polled with a deadline
        wait_for(
            lambda: checkpoint_eval.read_evaluation(settings, started.eval_id).state != "running",
            150,
            f"evaluation {started.eval_id} to end",
            interval=0.5,
        )
        result = checkpoint_eval.read_evaluation(settings, started.eval_id)
        elapsed = time.monotonic() - began
        sessions = server.wire.sampling_sessions[sessions_before:]
        samples = len(server.wire.samples)

    log = (checkpoint_eval.evaluations_dir(settings) / started.eval_id / "worker.log").read_text()
    assert result.state == "completed", (result.message, log[-3000:])
    print(f"Tinker evaluation of {result.items} items x 2 models: {elapsed:.1f} s")
    # At the wire: one sampling session of the checkpoint's sampler path, one of the base model.
    assert {"model_path": path, "base_model": None} in sessions
    assert {"model_path": None, "base_model": BASE} in sessions
    assert result.items == TEST_HELD_OUT_LIMIT and samples >= 2 * result.items
    assert result.estimated_cost is not None and result.estimated_cost["drivers"]["items"] == TEST_HELD_OUT_LIMIT
    assert result.checkpoint.backend == "tinker"
    assert result.checkpoint.weights == path and result.checkpoint.tinker_openai_model == path
    assert result.checkpoint.tinker_openai_base_url == TINKER_OPENAI_BASE_URL
    assert [m.model for m in result.models] == ["run:t1@3", f"base:{BASE}"]
    assert all(m.state == "done" and m.done == result.items for m in result.models)
    (comparison,) = result.comparisons
    assert comparison.stats.n == result.items
