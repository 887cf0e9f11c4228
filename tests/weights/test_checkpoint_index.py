"""The checkpoint index has one owner (mcp_rl.rundir): one reader (a later line for a path
supersedes earlier ones, deleted ones are gone for every reader), one writer, one per-run lock
around keep/delete/retention, and leases that keep a checkpoint in use from being deleted."""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from mcp_rl.errors import NotFound, UserError
from mcp_rl.metrics import store
from mcp_rl.run_checkpoints import resolve_checkpoint, resolve_ref
from mcp_rl.runconfig import RunConfig
from mcp_rl.rundir import (
    CheckpointRecord,
    active_leases,
    append_checkpoint,
    checkpoint_lock,
    lease_checkpoint,
    read_index,
)
from mcp_rl.settings import Settings
from mcp_rl.trainer.retention import prune
from mcp_rl.weights import checkpoints
from tests.kit.runs import record_checkpoint, write_run_file


def _local_run(settings: Settings, run_id: str, steps: range) -> RunConfig:
    config = write_run_file(settings, run_id, base_model="/m", steps=max(steps))
    for step in steps:
        folder = config.paths.checkpoints_dir / f"step_{step:06d}"
        (folder / "adapter").mkdir(parents=True)
        (folder / "adapter" / "adapter_config.json").write_text("{}")
        (folder / "trainer_state.pt").write_bytes(b"state")
        record_checkpoint(config, step, "state", str(folder), final=step == max(steps))
        record_checkpoint(config, step, "sampler", str(folder / "adapter"), final=step == max(steps))
    return config


def test_one_reader_later_lines_win_final_sticks_deleted_are_gone(tmp_path: Path) -> None:
    index = tmp_path / "checkpoints.jsonl"
    append_checkpoint(index, CheckpointRecord(step=1, kind="state", path="tinker://r/weights/1"))
    append_checkpoint(index, CheckpointRecord(step=2, kind="state", path="tinker://r/weights/2", final=True))
    append_checkpoint(index, CheckpointRecord(step=2, kind="state", path="tinker://r/weights/2", kept=True))
    append_checkpoint(index, CheckpointRecord(step=1, kind="state", path="tinker://r/weights/1", deleted=True))
    records = read_index(index).records
    assert [(r.step, r.final, r.kept) for r in records] == [(2, True, True)]
    assert [r.step for r in store.read_checkpoints(tmp_path)] == [2]


def test_a_deleted_tinker_checkpoint_is_refused_by_evaluation_and_smoke_tests(settings: Settings) -> None:
    config = write_run_file(settings, "t1", base_model="Qwen/Qwen3-4B", backend="tinker")
    for step in (2, 4):
        record_checkpoint(config, step, "state", f"tinker://s/weights/{step}")
        record_checkpoint(config, step, "sampler", f"tinker://s/sampler_weights/{step}", final=step == 4)
    assert resolve_checkpoint(settings, "t1", 2).weights == "tinker://s/sampler_weights/2"
    # What rl_delete_checkpoint appends once Tinker deleted them.
    for kind, where in (("state", "weights"), ("sampler", "sampler_weights")):
        record = CheckpointRecord(step=2, kind=kind, path=f"tinker://s/{where}/2", deleted=True)  # type: ignore[arg-type]
        append_checkpoint(config.paths.checkpoints_index, record)
    with pytest.raises(NotFound, match="Saved steps: 4"):
        resolve_checkpoint(settings, "t1", 2)  # rl_evaluate_checkpoint
    with pytest.raises(NotFound, match="Saved steps: 4"):
        resolve_ref(settings, "run:t1@2")  # rl_test_inference(models=["run:t1@2"])


def test_twenty_concurrent_keep_delete_pairs_never_delete_a_kept_checkpoint(settings: Settings) -> None:
    config = _local_run(settings, "r1", range(1, 22))  # step 21: final and newest (never deleted)
    barrier = threading.Barrier(40)

    def act(what: str, step: int) -> str:
        barrier.wait(timeout=60)
        try:
            (checkpoints.keep if what == "keep" else checkpoints.delete)(settings, "r1", step)
        except UserError:
            return "refused"
        return "done"

    with ThreadPoolExecutor(40) as pool:
        futures = {(w, s): pool.submit(act, w, s) for s in range(1, 21) for w in ("keep", "delete")}
        outcomes = {key: f.result(timeout=120) for key, f in futures.items()}
    current = {(r.step, r.kind): r for r in read_index(config.paths.checkpoints_index).records}
    for step in range(1, 21):
        folder = config.paths.checkpoints_dir / f"step_{step:06d}"
        kept, deleted = outcomes[("keep", step)] == "done", outcomes[("delete", step)] == "done"
        assert kept != deleted, (step, outcomes[("keep", step)], outcomes[("delete", step)])
        if kept:
            assert folder.is_dir() and current[(step, "state")].kept and current[(step, "sampler")].kept
        else:
            assert not folder.exists() and (step, "state") not in current


def test_a_leased_checkpoint_is_not_deleted_nor_pruned_until_its_holder_ends(settings: Settings) -> None:
    config = _local_run(settings, "r1", range(1, 5))
    run_dir = config.paths.run_dir
    step1 = config.paths.checkpoints_dir / "step_000001"
    with checkpoint_lock(run_dir):
        fd = lease_checkpoint(run_dir, str(step1 / "adapter"), "exp-1-abc")
    try:
        with pytest.raises(UserError, match="in use by exp-1-abc"):
            checkpoints.delete(settings, "r1", 1)
        assert prune(config.paths.checkpoints_dir, config.paths.checkpoints_index, keep_last=1) == [
            config.paths.checkpoints_dir / "step_000002",
            config.paths.checkpoints_dir / "step_000003",
        ]
        assert step1.is_dir()
    finally:
        os.close(fd)  # the holder ended: the kernel drops its lock, the lease is over
    with checkpoint_lock(run_dir):
        assert active_leases(run_dir) == []
    assert prune(config.paths.checkpoints_dir, config.paths.checkpoints_index, keep_last=1) == [step1]


def test_keep_or_delete_of_a_pruned_step_says_retention_deleted_it(settings: Settings) -> None:
    config = _local_run(settings, "r1", range(1, 5))
    prune(config.paths.checkpoints_dir, config.paths.checkpoints_index, keep_last=1)
    for act in (checkpoints.keep, checkpoints.delete):
        with pytest.raises(NotFound, match=r"step 2 \(its folder was deleted by retention.*steps \[4\]"):
            act(settings, "r1", 2)


def test_a_smoke_test_leases_its_run_checkpoint_to_its_worker_and_refuses_a_deleted_one(
    settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mcp_rl.inference_test import service as smoke

    base = tmp_path / "base-model"
    base.mkdir()
    (base / "config.json").write_text("{}")
    config = _local_run(settings, "r1", range(1, 4))
    held: list[int] = []

    def worker_holds_what_it_is_handed(*args: object, pass_fds: list[int], **kwargs: object) -> None:
        held.extend(os.dup(fd) for fd in pass_fds)  # the worker's copies: they outlive the start

    monkeypatch.setattr(smoke, "start_worker", worker_holds_what_it_is_handed)
    write_run_file(settings, "r1", base_model=str(base), steps=3)  # the same run, on a real base folder
    env = config.environment
    smoke.start_test(settings, env, {}, models=["run:r1@1"], num_steps=1, group_size=1)
    try:
        assert len(held) == 1
        with pytest.raises(UserError, match="in use by test"):
            checkpoints.delete(settings, "r1", 1)
    finally:
        for fd in held:
            os.close(fd)  # the worker ended: its lease is over
    checkpoints.delete(settings, "r1", 1)
    with pytest.raises(NotFound, match="Saved steps: 2, 3"):
        smoke.start_test(settings, env, {}, models=["run:r1@1"], num_steps=1, group_size=1)
