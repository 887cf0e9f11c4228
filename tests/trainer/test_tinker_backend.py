"""The Tinker backend against the FAKE Tinker SDK boundary (tests/fakes/fake_tinker.py), and a
whole trainer run on it against the real run-api (groups posted the way an environment would)."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import httpx
import pytest

from mcp_rl.settings import Settings
from mcp_rl.trainer.backends.base import AdamParams, SamplingRequest, TrainingExample
from mcp_rl.trainer.backends.tinker import LOSS_FN, TinkerBackend, load_tokenizer
from mcp_rl.trainer.loop import Trainer
from tests.fakes.fake_tinker import FakeServiceClient, FakeTinkerWorld
from tests.trainer.run_harness import arithmetic_run_config, child_env, http_ok, start, venv_bin, wait_until


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer(os.environ["MCP_RL_MODEL"])


def make_backend(world: FakeTinkerWorld, tokenizer, rank: int = 16) -> TinkerBackend:
    return TinkerBackend(FakeServiceClient(world), base_model="Qwen/Qwen3-8B", lora_rank=rank, tokenizer=tokenizer)


def test_setup_creates_a_lora_client_and_samples_from_saved_weights(tokenizer) -> None:
    world = FakeTinkerWorld()
    backend = make_backend(world, tokenizer, rank=16)
    assert world.runs[0]["base_model"] == "Qwen/Qwen3-8B" and world.runs[0]["rank"] == 16
    assert world.sampling_clients == world.saved_sampler == ["tinker://fake-run-1/sampler_weights/step_000000"]
    seqs = backend.sample(SamplingRequest(prompt_tokens=[1, 2, 3], n=3, max_tokens=5, temperature=0.7, stop=["\n"]))
    assert len(seqs) == 3 and all(len(s.tokens) == len(s.logprobs) for s in seqs)
    _, n, params = world.samples[0]
    assert n == 3 and params.max_tokens == 5 and params.temperature == 0.7 and list(params.stop) == ["\n"]


def test_forward_backward_sends_importance_sampling_datums(tokenizer) -> None:
    world = FakeTinkerWorld()
    backend = make_backend(world, tokenizer)
    example = TrainingExample(input_tokens=[5, 6, 7], target_tokens=[6, 7, 8], advantages=[0.0, 1.5, 1.5],
                              sampling_logprobs=[0.0, -0.3, -0.2], trained=[False, True, True])
    result = backend.forward_backward([example])
    data, loss_fn = world.forward_backward_calls[0]
    assert loss_fn == LOSS_FN == "importance_sampling"
    datum = data[0]
    assert datum.model_input.to_ints() == [5, 6, 7]
    assert datum.loss_fn_inputs["target_tokens"].tolist() == [6, 7, 8]
    assert datum.loss_fn_inputs["advantages"].tolist() == pytest.approx([0.0, 1.5, 1.5])
    assert datum.loss_fn_inputs["logprobs"].tolist() == pytest.approx([0.0, -0.3, -0.2])
    assert len(result.training_logprobs[0]) == 3 and result.loss != 0.0
    backend.optim_step(AdamParams(learning_rate=3e-5, beta1=0.8, beta2=0.9, eps=1e-7))
    adam = world.optim_steps[0]
    assert (adam.learning_rate, adam.beta1, adam.beta2, adam.eps) == (3e-5, 0.8, 0.9, 1e-7)


def test_sampler_follows_every_step_and_state_resumes(tokenizer) -> None:
    world = FakeTinkerWorld()
    backend = make_backend(world, tokenizer)
    path = backend.update_sampler(1)
    assert path == "tinker://fake-run-1/sampler_weights/step_000001"
    assert world.sampling_clients[-1] == path
    # The final save for the step just trained reuses that path instead of saving it twice.
    assert backend.save_sampler_weights("step_000001") == path
    state = backend.save_state("step_000001")
    assert state == "tinker://fake-run-1/weights/step_000001"
    other = make_backend(world, tokenizer)
    other.load_state(state)
    assert world.loaded_state == [state]


def _group(tokenizer, score_pattern: list[float]) -> dict:
    prompt = tokenizer.encode("<|im_start|>user\n2 + 2<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False)
    tokens, masks, lps = [], [], []
    for i, _ in enumerate(score_pattern):
        out = [tokenizer.encode(str(3 + i), add_special_tokens=False)[0], 2]
        tokens.append(prompt + out)
        masks.append([-100] * len(prompt) + out)
        lps.append([1.0] * len(prompt) + [-0.5, -0.1])
    return {"tokens": tokens, "masks": masks, "scores": score_pattern, "inference_logprobs": lps}


@pytest.mark.anyio
async def test_trainer_run_on_fake_tinker_records_saved_paths(tmp_path: Path, tokenizer) -> None:
    world = FakeTinkerWorld()
    config = arithmetic_run_config(tmp_path / "run", Path(os.environ["MCP_RL_MODEL"]), num_steps=3, batch_size=4,
                                   group_size=2, save_checkpoint_interval=2, run_id="tinkerfake")
    config = config.model_copy(update={"trainer": config.trainer.model_copy(update={"backend": "tinker", "base_model": "Qwen/Qwen3-8B"})})
    api_url = f"http://127.0.0.1:{config.ports.api}"
    api = start("api", [venv_bin("run-api"), "--host", "127.0.0.1", "--port", str(config.ports.api)],
                tmp_path / "api.log", child_env(tmp_path), tmp_path)
    try:
        wait_until(lambda: http_ok(f"{api_url}/status"), 60, "run-api", [api])
        settings = Settings.from_env(child_env(tmp_path))
        trainer = Trainer(config, settings, lambda c, s: make_backend(world, tokenizer))
        task = asyncio.create_task(trainer.run())
        await _wait_registered(api_url, task)
        async with httpx.AsyncClient() as http:
            for scores in ([1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [0.0, 1.0], [1.0, 0.0], [0.0, 0.0]):
                (await http.post(f"{api_url}/scored_data", json=_group(tokenizer, scores))).raise_for_status()
        assert await asyncio.wait_for(task, 120) == 0

        status = json.loads(config.paths.trainer_status.read_text())
        assert status["phase"] == "done" and status["step"] == 3
        # The final path reported is one the service really saved (upstream printed an unsaved one).
        assert status["final_weights"] in world.saved_sampler
        records = [json.loads(x) for x in config.paths.checkpoints_index.read_text().splitlines()]
        samplers = [r for r in records if r["kind"] == "sampler"]
        assert [r["step"] for r in samplers if not r["final"]] == [1, 2, 3]
        assert all(r["path"].startswith("tinker://") for r in records)
        states = [r for r in records if r["kind"] == "state"]
        assert [(r["step"], r["final"]) for r in states] == [(2, False), (3, True)]
        lines = [json.loads(x) for x in config.paths.metrics.read_text().splitlines()]
        assert [m["step"] for m in lines] == [1, 2, 3]
        # The API may hand the groups out in any order; every group is trained on exactly once.
        assert sum(m["reward/mean"] for m in lines) == pytest.approx((0.5 + 0.5 + 1.0 + 0.5 + 0.5 + 0.0) / 2)
        assert len(world.forward_backward_calls) == 3 and len(world.optim_steps) == 3
        assert world.optim_steps[0].learning_rate == config.trainer.learning_rate
        assert world.closed
    finally:
        api.stop()


async def _wait_registered(api_url: str, task: asyncio.Task) -> None:
    async with httpx.AsyncClient() as http:
        for _ in range(600):
            if task.done():
                raise AssertionError(f"trainer ended early with {task.result()}")
            info = (await http.get(f"{api_url}/info")).json()
            if info.get("batch_size", -1) != -1:
                return
            await asyncio.sleep(0.1)
    raise AssertionError("trainer did not register with the API in 60 s")


@pytest.mark.anyio
async def test_wandb_offline_gets_the_same_metrics_grouped_by_run(tmp_path: Path, tokenizer, monkeypatch) -> None:
    """W&B is optional: offline mode (no key, no network) records the trainer's metrics."""
    import wandb

    # wandb keeps process-wide settings; an earlier in-process wandb.Api (the results tests)
    # would leak into this in-process trainer. The real trainer is a process of its own.
    wandb.teardown()
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wandb"))
    monkeypatch.setenv("WANDB_SILENT", "true")
    (tmp_path / "wandb").mkdir()
    world = FakeTinkerWorld()
    config = arithmetic_run_config(tmp_path / "run", Path(os.environ["MCP_RL_MODEL"]), num_steps=1, batch_size=2,
                                   group_size=2, run_id="wandbrun")
    trainer_settings = config.trainer.model_copy(update={
        "backend": "tinker", "wandb": config.trainer.wandb.model_copy(update={"enabled": True, "project": "p"})})
    config = config.model_copy(update={"trainer": trainer_settings})
    api_url = f"http://127.0.0.1:{config.ports.api}"
    api = start("api", [venv_bin("run-api"), "--host", "127.0.0.1", "--port", str(config.ports.api)],
                tmp_path / "api.log", child_env(tmp_path), tmp_path)
    try:
        wait_until(lambda: http_ok(f"{api_url}/status"), 60, "run-api", [api])
        trainer = Trainer(config, Settings.from_env(child_env(tmp_path)), lambda c, s: make_backend(world, tokenizer))
        task = asyncio.create_task(trainer.run())
        await _wait_registered(api_url, task)
        async with httpx.AsyncClient() as http:
            (await http.post(f"{api_url}/scored_data", json=_group(tokenizer, [1.0, 0.0]))).raise_for_status()
            assert (await http.get(f"{api_url}/wandb_info")).json()["group"] == "wandbrun"
        assert await asyncio.wait_for(task, 120) == 0
    finally:
        api.stop()
    runs = list((tmp_path / "wandb").rglob("run-*.wandb"))
    assert len(runs) == 1, "no offline W&B run was written"
    # The offline run file is W&B's protobuf log: the group, job type and metric keys are in it.
    data = runs[0].read_bytes()
    for needle in (b"wandbrun", b"trainer", b"reward/mean", b"train/loss", b"advantages/std", b"logprobs/diff"):
        assert needle in data, needle


def test_a_tokenizer_that_is_not_local_is_a_clear_error(monkeypatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(RuntimeError, match="never downloads one at run time"):
        load_tokenizer("example-org/no-such-model-on-this-machine")
