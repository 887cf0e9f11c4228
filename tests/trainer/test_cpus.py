"""The torch thread default counts the cores this process may use, not the host's."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mcp_rl.trainer.cpus import usable_cpus


def _affinity() -> int:
    return len(os.sched_getaffinity(0))


def test_a_cgroup_v2_quota_caps_the_count(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: set(range(16)))
    (tmp_path / "cpu.max").write_text("200000 100000\n")  # 2 CPUs on a 16-core host
    assert usable_cpus(tmp_path) == 2
    (tmp_path / "cpu.max").write_text("150000 100000\n")  # 1.5 CPUs: 2 threads can run
    assert usable_cpus(tmp_path) == 2
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert usable_cpus(tmp_path) == 16


def test_a_cgroup_v1_quota_caps_the_count(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: set(range(8)))
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("100000\n")
    (tmp_path / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    assert usable_cpus(tmp_path) == 1
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("-1\n")  # unlimited
    assert usable_cpus(tmp_path) == 8


def test_affinity_without_a_quota_and_garbage_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: {0, 3, 5})
    assert usable_cpus(tmp_path) == 3  # no cgroup files at all
    (tmp_path / "cpu.max").write_text("garbage\n")
    assert usable_cpus(tmp_path) == 3
    assert usable_cpus() >= 1 and usable_cpus() <= _affinity()  # this machine, as it is
