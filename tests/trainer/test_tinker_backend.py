"""The Tinker backend through the REAL tinker SDK (`tinker.ServiceClient`) against a loopback
server that speaks Tinker's REST API (tests/fakes/tinker_server.py), and a whole trainer run on it
against the real run-api (groups posted the way an environment would)."""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
from pathlib import Path

import pytest

from mcp_rl.runconfig import WandbSettings
from mcp_rl.settings import Settings
from mcp_rl.trainer.backends import tinker as tinker_backend
from mcp_rl.trainer.backends.base import AdamParams, SamplingRequest, TrainingExample
from mcp_rl.trainer.backends.tinker import LOSS_FN
from mcp_rl.trainer.loop import Trainer
from tests.fakes.tinker_server import TinkerServer, TinkerWire, policy_logprob
from tests.kit.run_harness import child_env
from tests.kit.tinker_wire import (
    MODEL,
    example,
    make_backend,
    scored_group,
    serve,
    tinker_run_config,
    trainer_on_the_wire,
)


def test_setup_creates_one_lora_model_and_samples_from_ephemeral_weights(tiny_tokenizer: str) -> None:
    with serve(tiny_tokenizer) as server:
        backend = make_backend(server, rank=16)
        backend.prepare()
        wire = server.wire
        assert [(c["base_model"], c["lora_config"]["rank"]) for c in wire.created] == [(MODEL, 16)]
        # Sampling follows ephemeral weights: no named, persistent checkpoint at setup.
        assert [s["kind"] for s in wire.saves] == ["ephemeral"]
        # The tokenizer is the training client's own (get_info's tokenizer_id).
        assert backend.tokenizer.convert_tokens_to_ids("w42") == 42
        seqs = backend.sample(SamplingRequest(prompt_tokens=[1, 2, 3], n=3, max_tokens=5, temperature=0.7, stop=["\n"]))
        assert len(seqs) == 3 and all(len(s.tokens) == len(s.logprobs) for s in seqs)
        sent = wire.samples[0]
        assert sent["num_samples"] == 3 and sent["params"]["max_tokens"] == 5
        assert sent["params"]["temperature"] == 0.7 and sent["params"]["stop"] == ["\n", "<eos>"]  # EOS kept
        backend.close("success")
        assert wire.unauthorized == 0
        assert [s["finished"] for s in wire.sessions.values()] == ["success"]


def test_a_wrong_key_is_refused_on_the_wire(tiny_tokenizer: str) -> None:
    with serve(tiny_tokenizer) as server:
        backend = make_backend(server, api_key="tml-not-the-key")
        with pytest.raises(Exception, match="401|API key"):
            backend.prepare()
        assert server.wire.unauthorized >= 1 and not server.wire.created


def test_a_step_submits_forward_backward_optim_and_sampler_weights_in_one_cycle(tiny_tokenizer: str) -> None:
    with serve(tiny_tokenizer, cycle_s=0.4) as server:
        backend = make_backend(server)
        backend.prepare()
        batch = [example([5, 6, 7], 1.0, [-0.5, -0.3, -0.2]), example([5, 6, 8], -1.0, [-0.5, -0.4, -0.1])]
        result, sampler_path = backend.train_step(
            batch, AdamParams(learning_rate=3e-5, beta1=0.8, beta2=0.9, eps=1e-7), 1
        )
        wire = server.wire
        fwd_bwd, optim = wire.forward_backward[-1], wire.optim_steps[-1]
        # optim_step reached the service before the client had forward_backward's result...
        assert fwd_bwd["request_id"] in optim["undelivered_fwd_bwd"]
        # ...and both, with the next sampler weights, finished in the same clock cycle.
        ephemeral = [s for s in wire.saves if s["kind"] == "ephemeral"][-1]
        assert (
            wire.tick_of(fwd_bwd["ready_at"]) == wire.tick_of(optim["ready_at"]) == wire.tick_of(ephemeral["ready_at"])
        )
        assert fwd_bwd["loss_fn"] == LOSS_FN == "importance_sampling"
        adam = optim["params"]
        assert (adam["learning_rate"], adam["beta1"], adam["beta2"], adam["eps"]) == (3e-5, 0.8, 0.9, 1e-7)
        # Sampling moved to the new weights without a persistent checkpoint.
        assert sampler_path is None and ephemeral["version"] == 1
        backend.sample(SamplingRequest(prompt_tokens=[1, 2], n=1, max_tokens=2))
        assert wire.samples[-1]["version"] == 1
        assert len(result.training_logprobs) == 2 and len(result.training_logprobs[0]) == 3
        backend.close("success")


def local_objective(batch: list[TrainingExample], logprob) -> float:
    """The local backend's loss (backends/local.py `_group_loss`) for a policy: trained tokens only,
    `-sum exp(logp - old) * advantage`, where a sequence without sampler logprobs uses its own
    logprobs as `old` (ratio 1)."""
    total = 0.0
    for e in batch:
        for t, keep in enumerate(e.trained):
            if not keep:
                continue
            lp = logprob(t, e.target_tokens[t])
            old = e.sampling_logprobs[t] if e.sampling_logprobs is not None else lp
            total -= math.exp(lp - old) * e.advantages[t]
    return total


def test_without_sampler_logprobs_the_ratio_is_1_and_the_loss_is_the_local_backends(tiny_tokenizer: str) -> None:
    with serve(tiny_tokenizer) as server:
        backend = make_backend(server)
        backend.prepare()
        batch = [example([5, 6, 7, 9], 1.5, None), example([5, 6, 8, 2], -0.5, [-0.2, -0.9, -0.4, -1.1])]
        result, _ = backend.train_step(batch, AdamParams(learning_rate=1e-4), 1)
        wire = server.wire
        # The current policy's logprobs came from one forward pass before the step.
        assert len(wire.forwards) == 1 and len(wire.forwards[0]["datums"]) == 1
        record = wire.forward_backward[-1]
        assert record["ratios"][0] == pytest.approx([1.0] * 4, abs=1e-6)
        sent = record["datums"][0]["logprobs"]
        assert list(sent) == pytest.approx([policy_logprob(0, t, x) for t, x in enumerate([6, 7, 8, 10])], abs=1e-6)
        # The loss Tinker computed from the datums equals the local backend's objective.
        expected = local_objective(batch, lambda t, tok: policy_logprob(0, t, tok))
        assert record["loss"] == pytest.approx(expected, abs=1e-5)
        assert result.loss == pytest.approx(expected, abs=1e-5)
        # The old placeholder (logprobs 0.0) would have weighted each token by p(token) instead.
        placeholder = sum(-math.exp(policy_logprob(0, t, tok)) * 1.5 for t, tok in enumerate([6, 7, 8, 10]) if t >= 1)
        assert abs(placeholder - (-1.5 * 3)) > 0.5
        backend.close("success")


def test_only_interval_checkpoints_are_persistent_and_they_expire_but_the_final_one_does_not(
    tiny_tokenizer: str,
) -> None:
    with serve(tiny_tokenizer) as server:
        backend = make_backend(server, checkpoint_ttl_s=7200)
        backend.prepare()
        for step in (1, 2, 3):
            backend.train_step([example([5, 6, 7], 1.0, [-0.1, -0.2, -0.3])], AdamParams(learning_rate=1e-4), step)
        state, weights = backend.save_checkpoint("step_000002", final=False)
        final_state, final_weights = backend.save_checkpoint("step_000003", final=True)
        named = [(s["kind"], s["name"], s["ttl_seconds"]) for s in server.wire.saves if s["kind"] != "ephemeral"]
        assert named == [
            ("state", "step_000002", 7200),
            ("sampler", "step_000002", 7200),
            ("state", "step_000003", None),
            ("sampler", "step_000003", None),
        ]
        assert state.endswith("/weights/step_000002") and weights.endswith("/sampler_weights/step_000002")
        assert final_state.startswith("tinker://") and final_weights.endswith("/sampler_weights/step_000003")
        backend.close("success")


def test_resume_loads_the_state_with_its_optimizer_and_creates_nothing_else(tiny_tokenizer: str) -> None:
    with serve(tiny_tokenizer) as server:
        first = make_backend(server)
        first.prepare()
        state, _ = first.save_checkpoint("step_000002", final=False)
        first.close("interrupted", "stopped by SIGTERM")
        wire = server.wire
        created, saves = len(wire.created), len(wire.saves)
        resumed = make_backend(server)
        resumed.load_state(state)
        resumed.prepare()
        assert len(wire.created) == created  # no throwaway LoRA model
        assert [(x["path"], x["optimizer"]) for x in wire.loads] == [(state, True)]
        assert [s["kind"] for s in wire.saves[saves:]] == ["ephemeral"]  # no step_000000
        resumed.close("success")
        assert [(s["finished"], s["detail"]) for s in wire.sessions.values()] == [
            ("interrupted", "stopped by SIGTERM"),
            ("success", None),
        ]


def test_a_refused_session_finish_is_only_a_warning(tiny_tokenizer: str, caplog: pytest.LogCaptureFixture) -> None:
    with serve(tiny_tokenizer) as server:
        server.wire.finish_status = 404  # a Tinker-compatible server without the finish endpoint
        backend = make_backend(server)
        backend.prepare()
        with caplog.at_level(logging.WARNING, logger=tinker_backend.__name__):
            backend.close("errored", "boom")
        assert "did not record the end of the session" in caplog.text


def test_model_creation_has_a_deadline_and_reports_the_wait(
    tiny_tokenizer: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tinker_backend, "WAIT_REPORT_S", 0.2)
    with serve(tiny_tokenizer, create_model_s=30) as server:
        backend = make_backend(server, create_timeout_s=1.0)
        waits: list[float] = []
        with pytest.raises(RuntimeError, match="MCP_RL_TINKER_CREATE_TIMEOUT"):
            backend.prepare(waits.append)
        # Cut at the 1 s deadline, long before the 30 s creation (slack for a loaded machine).
        assert len(waits) >= 3 and waits == sorted(waits) and waits[-1] < 5


def test_an_unavailable_tokenizer_says_how_to_get_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with TinkerServer(TinkerWire(tokenizer_id="example-org/no-such-model-anywhere")) as server:
        backend = make_backend(server)
        with pytest.raises(RuntimeError) as err:
            backend.prepare()
        message = str(err.value)
        assert "hf download" in message and "MCP_RL_TOKENIZER_PATH" in message and "HF_HUB_OFFLINE" in message
        backend.close("errored")


def test_a_tokenizer_folder_is_used_as_given(tiny_tokenizer: str, tmp_path: Path) -> None:
    assert tinker_backend.load_tokenizer(tiny_tokenizer).convert_tokens_to_ids("w7") == 7
    with pytest.raises(RuntimeError, match="MCP_RL_TOKENIZER_PATH"):
        tinker_backend.load_tokenizer(str(tmp_path / "empty"))


# --- a whole trainer run on the wire fake ------------------------------------------------------
@pytest.mark.anyio
async def test_trainer_run_on_the_wire_records_saved_paths_and_finishes_the_session(
    tmp_path: Path, tiny_tokenizer: str
) -> None:
    config = tinker_run_config(
        tmp_path,
        tiny_tokenizer,
        num_steps=3,
        batch_size=4,
        group_size=2,
        save_checkpoint_interval=2,
        run_id="tinkerwire",
    )
    async with trainer_on_the_wire(config, tmp_path, tiny_tokenizer, {"MCP_RL_TINKER_CHECKPOINT_TTL": "86400"}) as run:
        scores = ([1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [0.0, 1.0], [1.0, 0.0], [0.0, 0.0])
        await run.post(*map(scored_group, scores))
        assert await run.finish() == 0
    wire = run.wire
    status = json.loads(config.paths.trainer_status.read_text())
    assert status["phase"] == "done" and status["step"] == 3
    records = [json.loads(x) for x in config.paths.checkpoints_index.read_text().splitlines()]
    # Per-step sampler weights are ephemeral: only the interval and final checkpoints are recorded.
    assert [(r["kind"], r["step"], r["final"]) for r in records] == [
        ("state", 2, False),
        ("sampler", 2, False),
        ("state", 3, True),
        ("sampler", 3, True),
    ]
    saved = {s["path"]: s["ttl_seconds"] for s in wire.saves if s["kind"] != "ephemeral"}
    assert {r["path"]: saved[r["path"]] for r in records} == {
        records[0]["path"]: 86400,
        records[1]["path"]: 86400,
        records[2]["path"]: None,
        records[3]["path"]: None,
    }
    assert status["final_weights"] == records[3]["path"]
    lines = [json.loads(x) for x in config.paths.metrics.read_text().splitlines()]
    # Step 0 is the base model's held-out evaluation (issue 24), before any training.
    assert [m["step"] for m in lines] == [0, 1, 2, 3]
    assert "eval/score" in lines[0] and "reward/mean" not in lines[0], lines[0]
    lines = lines[1:]
    assert sum(m["reward/mean"] for m in lines) == pytest.approx((0.5 + 0.5 + 1.0 + 0.5 + 0.5 + 0.0) / 2)
    assert len(wire.forward_backward) == 3 and len(wire.optim_steps) == 3
    assert all(o["undelivered_fwd_bwd"] for o in wire.optim_steps)
    assert [s["finished"] for s in wire.sessions.values()] == ["success"]
    assert wire.unauthorized == 0


@pytest.mark.anyio
async def test_a_failed_run_finishes_the_session_as_errored(tmp_path: Path, tiny_tokenizer: str) -> None:
    # No Atropos API is listening: registering fails after the model was created.
    config = tinker_run_config(
        tmp_path,
        tiny_tokenizer,
        num_steps=1,
        batch_size=2,
        group_size=2,
        run_id="tinkerfail",
        api_unreachable_timeout_s=0.5,
    )
    with serve(tiny_tokenizer) as server:
        trainer = Trainer(config, Settings.from_env(child_env(tmp_path)), lambda c, s: make_backend(server))
        assert await asyncio.wait_for(trainer.run(), 60) == 1
        sessions = list(server.wire.sessions.values())
        assert [s["finished"] for s in sessions] == ["errored"] and sessions[0]["detail"]


@pytest.mark.anyio
async def test_wandb_offline_gets_the_same_metrics_grouped_by_run(
    tmp_path: Path, tiny_tokenizer: str, monkeypatch
) -> None:
    """W&B is optional: offline mode (no key, no network) records the trainer's metrics."""
    import wandb

    # wandb keeps process-wide settings; an earlier in-process wandb.Api (the results tests)
    # would leak into this in-process trainer. The real trainer is a process of its own.
    wandb.teardown()
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wandb"))
    monkeypatch.setenv("WANDB_SILENT", "true")
    (tmp_path / "wandb").mkdir()
    wandb_on = WandbSettings(enabled=True, project="p")
    config = tinker_run_config(
        tmp_path, tiny_tokenizer, num_steps=1, batch_size=2, group_size=2, run_id="wandbrun", wandb=wandb_on
    )
    async with trainer_on_the_wire(config, tmp_path, tiny_tokenizer) as run:
        await run.post(scored_group([1.0, 0.0]))
        assert (await run.http.get(f"{run.api_url}/wandb_info")).json()["group"] == "wandbrun"
        assert await run.finish() == 0
    runs = list((tmp_path / "wandb").rglob("run-*.wandb"))
    assert len(runs) == 1, "no offline W&B run was written"
    # The offline run file is W&B's protobuf log: the group, job type and metric keys are in it.
    data = runs[0].read_bytes()
    for needle in (b"wandbrun", b"trainer", b"reward/mean", b"train/loss", b"advantages/std", b"logprobs/diff"):
        assert needle in data, needle


@pytest.mark.anyio
async def test_a_queued_model_creation_shows_in_the_trainer_status(
    tmp_path: Path, tiny_tokenizer: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tinker_backend, "WAIT_REPORT_S", 0.1)
    config = tinker_run_config(
        tmp_path,
        tiny_tokenizer,
        num_steps=1,
        batch_size=2,
        group_size=2,
        run_id="tinkerqueue",
        api_unreachable_timeout_s=0.5,
    )
    with serve(tiny_tokenizer, create_model_s=1.0) as server:
        trainer = Trainer(config, Settings.from_env(child_env(tmp_path)), lambda c, s: make_backend(server))
        task = asyncio.create_task(trainer.run())
        seen: list[dict] = []
        deadline = time.monotonic() + 60
        while not task.done() and time.monotonic() < deadline:
            if config.paths.trainer_status.exists():
                status = json.loads(config.paths.trainer_status.read_text())
                if status["phase"] == "waiting_for_model":
                    seen.append(status)
            await asyncio.sleep(0.05)
        assert await task == 1  # no Atropos API: the run fails after the model was created
    assert seen and seen[-1]["model_wait_s"] > 0


@pytest.mark.anyio
async def test_a_resumed_trainer_loads_its_state_and_creates_no_model(tmp_path: Path, tiny_tokenizer: str) -> None:
    from mcp_rl.trainer.status import RunRecorder

    config = tinker_run_config(
        tmp_path,
        tiny_tokenizer,
        num_steps=5,
        batch_size=2,
        group_size=2,
        run_id="tinkerresume",
        api_unreachable_timeout_s=0.5,
    )
    with serve(tiny_tokenizer) as server:
        first = make_backend(server)
        first.prepare()
        state, _ = first.save_checkpoint("step_000002", final=False)
        first.close("interrupted")
        config.paths.run_dir.mkdir(parents=True, exist_ok=True)
        RunRecorder(config.paths, 5).checkpoint(2, "state", state)
        created = len(server.wire.created)
        trainer = Trainer(config, Settings.from_env(child_env(tmp_path)), lambda c, s: make_backend(server))
        assert await asyncio.wait_for(trainer.run(), 60) == 1  # no Atropos API: fails after loading
        wire = server.wire
        assert len(wire.created) == created
        assert [(x["path"], x["optimizer"]) for x in wire.loads] == [(state, True)]
        assert not [s for s in wire.saves if s["kind"] != "ephemeral" and s["name"] == "step_000000"]
    status = json.loads(config.paths.trainer_status.read_text())
    assert status["resume_state"] == state and status["step"] == 2
