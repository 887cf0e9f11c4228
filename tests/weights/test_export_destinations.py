"""Destinations that cannot hurt (issue 33): an export aimed at the run, its checkpoint, '/', a
home folder, through a link, at a relative path or at a folder mcp-rl did not write is refused
and changes nothing; one destination is written by one export at a time; a killed worker reads
failed within 20 s with no temporary folder left. No model: the adapter here is a stand-in file
pair (a real export of it runs the real worker, whose tokenizer step notes the missing base)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from mcp_rl import processes
from mcp_rl.errors import UserError
from mcp_rl.rundir import RunPaths
from mcp_rl.settings import Settings
from mcp_rl.weights import checkpoints, jobs
from mcp_rl.weights.destination import MARKER_FILE, check_existing, write_marker
from mcp_rl.weights.jobs import ExportState
from tests.kit.runs import record_checkpoint, write_run_file
from tests.kit.wait import wait_for


def _run(settings: Settings, run_id: str = "r1", steps: tuple[int, ...] = (1, 2, 3)) -> RunPaths:
    config = write_run_file(settings, run_id, base_model="/no/such/model", steps=max(steps))
    for step in steps:
        folder = config.paths.checkpoints_dir / f"step_{step:06d}"
        (folder / "adapter").mkdir(parents=True)
        (folder / "adapter" / "adapter_config.json").write_text("{}")
        (folder / "adapter" / "adapter_model.safetensors").write_bytes(b"\0" * 1024)
        (folder / "trainer_state.pt").write_bytes(b"state")
        record_checkpoint(config, step, "state", str(folder), final=step == max(steps))
        record_checkpoint(config, step, "sampler", str(folder / "adapter"), final=step == max(steps))
    return config.paths


def _tree(root: Path) -> dict[str, bytes]:
    """Every file's bytes (the empty lock files a check takes are not the user's)."""
    files = sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink() and p.suffix != ".lock")
    return {str(p): p.read_bytes() for p in files}


def _start(settings: Settings, dest: str | None, overwrite: bool = True, step: int | None = None) -> jobs.ExportStatus:
    return jobs.start(settings, "r1", step=step, format="adapter", dest=dest, push_to_hub=None, overwrite=overwrite)


def _wait(settings: Settings, export_id: str, timeout_s: float) -> jobs.ExportStatus:
    """The export's status once it is no longer running (fails after `timeout_s`)."""

    def ended() -> jobs.ExportStatus | None:
        status = jobs.read_status(settings, export_id)
        return status if status.state != ExportState.RUNNING else None

    return wait_for(ended, timeout_s, f"export {export_id} to end", interval=0.2)


def test_an_export_aimed_at_the_run_or_its_checkpoint_is_refused_and_both_stay_whole(settings: Settings) -> None:
    paths = _run(settings)
    before = _tree(settings.home)
    final = paths.checkpoints_dir / "step_000003"
    for dest, words in [
        (paths.run_dir, "holds the checkpoint being exported"),
        (final, "checkpoint being exported"),
        (final / "adapter", "checkpoint being exported"),
        (paths.checkpoints_dir / "step_000001", "inside the runs folder"),
        # The same folders spelled with a leading // (issue 43 item 7): one normaliser, the same answer.
        (f"/{paths.checkpoints_dir / 'step_000001'}", "inside the runs folder"),
        (f"//{settings.runs_dir}/r1/logs/", "inside the runs folder"),
        (f"/{settings.runs_dir}/./r1/../r1/metrics", "inside the runs folder"),
        (settings.runs_dir, "holds mcp-rl's state folder"),
        (settings.home, "holds mcp-rl's state folder"),
        (settings.home.parent, "holds mcp-rl's state folder"),
    ]:
        with pytest.raises(UserError, match=words):
            _start(settings, str(dest))
    assert _tree(settings.home) == before
    assert not (settings.home / "exports").exists() or not any((settings.home / "exports").glob("exp-*"))


@pytest.mark.parametrize(
    ("dest", "words"),
    [
        ("/", "whole file system"),
        ("/root", "home folder itself"),
        ("my-model", "relative.*give an absolute path, e.g. /"),
        ("./out/../x", "relative"),
        ("/tmp/a\x00b", "NUL byte"),
        ("/tmp/" + "a" * 5000, "5005 characters long"),
        ("/tmp/" + "a" * 300, "more than 255 bytes"),
        ("", "dest is empty"),
    ],
)
def test_destinations_that_cannot_be_right_are_refused_with_the_reason(
    settings: Settings, dest: str, words: str
) -> None:
    _run(settings)
    with pytest.raises(UserError, match=words):
        _start(settings, dest)


def test_a_link_anywhere_on_the_path_is_refused_and_its_target_untouched(settings: Settings, tmp_path: Path) -> None:
    _run(settings)
    target = tmp_path / "precious"
    target.mkdir()
    (target / "thesis.tex").write_text("years of work")
    write_marker(target)  # even a folder that looks like an export is not reached through a link
    (tmp_path / "link").symlink_to(target)
    (tmp_path / "linked-parent").symlink_to(tmp_path)
    for dest in (tmp_path / "link", tmp_path / "linked-parent" / "precious", tmp_path / "link" / "sub"):
        with pytest.raises(UserError, match="link"):
            _start(settings, str(dest))
    assert (target / "thesis.tex").read_text() == "years of work"


def test_overwrite_replaces_only_a_folder_an_export_wrote(tmp_path: Path) -> None:
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("the user's")
    with pytest.raises(UserError, match="not written by an mcp-rl export"):
        check_existing(mine, overwrite=True)
    with pytest.raises(UserError, match="overwrite=true"):
        check_existing(mine, overwrite=False)
    write_marker(mine, run_id="r1", step=1, format="adapter")
    check_existing(mine, overwrite=True)  # an export's folder: may be replaced
    (tmp_path / "empty").mkdir()
    check_existing(tmp_path / "empty", overwrite=False)


def test_one_destination_one_export_and_a_killed_worker_fails_fast_leaving_nothing(
    settings: Settings, tmp_path: Path
) -> None:
    _run(settings)
    dest = tmp_path / "out"
    first = _start(settings, str(dest), overwrite=False, step=1)
    worker = processes.prove(first.pid, first.pid_started_at, first.marker).process
    assert worker is not None
    # Paused while the refusals are checked: on a quiet machine this small export can finish
    # within the seconds a second start waits for a finishing worker to let go of its claim.
    worker.send_signal(signal.SIGSTOP)
    try:
        with pytest.raises(UserError, match="another export is writing to"):
            _start(settings, str(dest), overwrite=True, step=3)
        # The checkpoint it reads is leased: not deleted while the export runs.
        with pytest.raises(UserError, match=f"in use by export {first.export_id}"):
            checkpoints.delete(settings, "r1", 1)
        worker.send_signal(signal.SIGCONT)

        # Kill the worker once its temporary folder is there (it then loads the tokenizer).
        def writing() -> bool:
            assert jobs.read_status(settings, first.export_id).state == ExportState.RUNNING
            return bool(list(tmp_path.glob(f".out.tmp-{first.pid}-*")))

        wait_for(writing, 120, "the worker to begin writing")
        assert list(tmp_path.glob(".out.tmp-*")), "the worker never began writing"
    finally:
        proof = processes.prove(first.pid, first.pid_started_at, first.marker)
        if proof.alive and proof.process is not None:
            proof.process.send_signal(signal.SIGKILL)
    killed = time.monotonic()
    status = _wait(settings, first.export_id, 20)
    assert status.state == ExportState.FAILED and time.monotonic() - killed < 20, status
    assert "ended without a result" in (status.error or "")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["home"]  # no .out.tmp-* left, no out
    # The claim and the lease ended with the worker: the same destination is free again.
    second = _start(settings, str(dest), overwrite=False, step=1)
    done = _wait(settings, second.export_id, 120)
    assert done.state == ExportState.DONE, done
    assert (dest / MARKER_FILE).is_file() and MARKER_FILE not in (done.result.files if done.result else [])
    assert sorted(os.listdir(tmp_path)) == ["home", "out"]
