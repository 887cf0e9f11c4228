"""A folder replaced by `replace_dir` is never lost when its writer dies between the two renames
(issue 33: a killed overwrite export must not take the previous export with it)."""

from __future__ import annotations

import os
from pathlib import Path

from mcp_rl.atomic import aside_sibling, recover_aside, replace_dir, temp_sibling


def _folder(path: Path, text: str) -> Path:
    path.mkdir(parents=True)
    (path / "weights.txt").write_text(text)
    return path


def test_replace_dir_puts_the_new_folder_in_place_and_leaves_nothing_beside(tmp_path: Path) -> None:
    target = _folder(tmp_path / "out", "old")
    new = _folder(temp_sibling(target), "new")
    replace_dir(new, target)
    assert (target / "weights.txt").read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_a_writer_killed_between_the_renames_gets_the_old_folder_back(tmp_path: Path) -> None:
    target = _folder(tmp_path / "out", "old")
    pid = 424242
    # The state replace_dir leaves if killed after its first rename: the old folder aside, the
    # new one still in its temporary folder, nothing at the target.
    os.replace(target, aside_sibling(target, pid))
    _folder(tmp_path / f".out.tmp-{pid}-1", "unfinished")
    assert recover_aside(target, pid) == []
    assert (target / "weights.txt").read_text() == "old"
    # Another writer's folder aside is not this one's to touch.
    other = _folder(aside_sibling(tmp_path / "out", 7), "other")
    assert recover_aside(target, pid) == [] and other.is_dir()


def test_when_the_new_folder_is_whole_the_old_one_aside_is_removed(tmp_path: Path) -> None:
    pid = 424243
    old = _folder(aside_sibling(tmp_path / "out", pid), "old")
    target = _folder(tmp_path / "out", "new")
    assert recover_aside(target, pid) == [old]
    assert (target / "weights.txt").read_text() == "new" and not old.exists()
