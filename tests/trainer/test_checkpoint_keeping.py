"""Checkpoints that do not silently expire or pile up: the last checkpoint of a stopped or
failed Tinker run has no TTL (through the real tinker SDK against the loopback Tinker), local
retention keeps the final, the kept and the last K, and an adapter is always written anew."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from mcp_rl.rundir import TrainerPhase, read_checkpoints
from mcp_rl.settings import Settings
from mcp_rl.trainer.loop import Trainer
from mcp_rl.trainer.retention import disk_bytes, prune
from mcp_rl.trainer.status import RunRecorder
from tests.fakes.tinker_server import TinkerServer
from tests.kit.run_harness import child_env
from tests.kit.tinker_wire import make_backend, serve, tinker_run_config


def _trainer(tmp_path: Path, tokenizer: str, server: TinkerServer, ttl: int = 86400) -> Trainer:
    config = tinker_run_config(tmp_path, tokenizer, num_steps=5, run_id="keep")
    settings = Settings.from_env(child_env(tmp_path))
    trainer = Trainer(config, settings, lambda c, s: None)  # type: ignore[arg-type,return-value]
    backend = make_backend(server, rank=4, checkpoint_ttl_s=ttl)
    backend.prepare()
    trainer.backend = backend
    config.paths.run_dir.mkdir(parents=True, exist_ok=True)
    for phase in (TrainerPhase.STARTING, TrainerPhase.LOADING_MODEL, TrainerPhase.WAITING_FOR_BATCH):
        trainer.recorder.update(phase=phase)
    return trainer


@pytest.mark.anyio
async def test_a_stop_after_an_unsaved_step_saves_it_without_ttl(tmp_path: Path, tiny_tokenizer: str) -> None:
    with serve(tiny_tokenizer) as server:
        trainer = _trainer(tmp_path, tiny_tokenizer, server)
        await asyncio.to_thread(trainer._save, 2, False)  # periodic: expires
        trainer.recorder.update(step=3)
        await trainer._finish(False)
        saves = {(s["kind"], s["name"]): s["ttl_seconds"] for s in server.wire.saves if s["kind"] != "ephemeral"}
        trainer.backend.close("interrupted")
    assert saves == {
        ("state", "step_000002"): 86400,
        ("sampler", "step_000002"): 86400,
        ("state", "step_000003"): None,
        ("sampler", "step_000003"): None,
    }
    records = read_checkpoints(trainer.config.paths.checkpoints_index).records
    last = [r for r in records if r.step == 3]
    assert last and all(r.kept and r.expires_at is None and not r.final for r in last)
    assert all(r.expires_at is not None for r in records if r.step == 2)


@pytest.mark.anyio
async def test_a_stop_right_after_a_periodic_save_removes_its_ttl_on_the_wire(
    tmp_path: Path, tiny_tokenizer: str
) -> None:
    with serve(tiny_tokenizer) as server:
        trainer = _trainer(tmp_path, tiny_tokenizer, server)
        trainer.recorder.update(step=2)
        await asyncio.to_thread(trainer._save, 2, False)
        await trainer._finish(False)
        calls = list(server.wire.ttl_calls)
        trainer.backend.close("interrupted")
    paths = {r.path for r in read_checkpoints(trainer.config.paths.checkpoints_index).records}
    assert sorted(calls) == sorted((p, None) for p in paths)
    newest = {}
    for r in read_checkpoints(trainer.config.paths.checkpoints_index).records:
        newest[r.path] = r
    assert all(r.kept for r in newest.values())


@pytest.mark.anyio
async def test_a_failed_run_keeps_its_last_checkpoint(tmp_path: Path, tiny_tokenizer: str) -> None:
    with serve(tiny_tokenizer) as server:
        trainer = _trainer(tmp_path, tiny_tokenizer, server)
        await asyncio.to_thread(trainer._save, 2, False)
        await asyncio.to_thread(trainer._save, 4, False)
        await trainer._keep_last()
        calls = list(server.wire.ttl_calls)
        trainer.backend.close("errored")
    assert {p.rsplit("/", 1)[-1] for p, _ in calls} == {"step_000004"} and all(t is None for _, t in calls)


def _record(recorder: RunRecorder, folder: Path, step: int, **kw: bool) -> None:
    (folder / f"{step:06d}" / "adapter").mkdir(parents=True)
    (folder / f"{step:06d}" / "trainer_state.pt").write_bytes(b"x" * 100)
    recorder.checkpoint(step, "state", str(folder / f"{step:06d}"), **kw)
    recorder.checkpoint(step, "sampler", str(folder / f"{step:06d}" / "adapter"), **kw)


def test_retention_keeps_final_kept_and_last_k(tmp_path: Path) -> None:
    from mcp_rl.rundir import RunPaths

    paths = RunPaths.for_run(tmp_path / "run")
    paths.run_dir.mkdir()
    recorder = RunRecorder(paths, 10)
    folder = paths.checkpoints_dir
    for step in (1, 2, 3, 4, 5, 6):
        _record(recorder, folder, step, kept=step == 2)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    recorder.checkpoint(0, "sampler", str(outside))  # never under checkpoints/: never deleted
    assert disk_bytes(folder) == 600
    deleted = prune(folder, paths.checkpoints_index, keep_last=2)
    assert sorted(p.name for p in deleted) == ["000001", "000003", "000004"]
    assert sorted(p.name for p in folder.iterdir()) == ["000002", "000005", "000006"]
    assert outside.is_dir()
    # 0 keeps every one
    assert prune(folder, paths.checkpoints_index, keep_last=0) == []


@pytest.mark.slow
def test_save_always_rewrites_the_adapter(model_dir: Path, tmp_path: Path) -> None:
    from mcp_rl.trainer.backends.local import LocalBackend

    backend = LocalBackend(model_dir, lora_rank=2, checkpoints_dir=tmp_path)
    stale = Path(backend.save_sampler_weights("000001"))
    (stale / "adapter_model.safetensors").write_bytes(b"stale")
    (stale / "leftover").write_text("from the crashed attempt")
    path = Path(backend.save_sampler_weights("000001"))
    assert path == stale and (path / "adapter_model.safetensors").read_bytes() != b"stale"
    assert not (path / "leftover").exists()
    assert not [p for p in tmp_path.joinpath("000001").iterdir() if p.name.startswith(".")]
    json.loads((path / "adapter_config.json").read_text())
