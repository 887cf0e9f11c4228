from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.cluster.ray_cluster import RayHead
from tests.cluster.slurm_cluster import SlurmCluster


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    """One single-node Slurm cluster for the session's cluster tests (about 2 s to start)."""
    with SlurmCluster(tmp_path_factory.mktemp("slurm")) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def ray_head() -> Iterator[RayHead]:
    """One local Ray head for the session's Ray tests (Ray from PyPI in a venv outside the checkout)."""
    with RayHead() as head:
        yield head
