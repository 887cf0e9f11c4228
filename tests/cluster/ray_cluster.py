"""A local Ray head for tests: `ray[default]` from PyPI in a venv outside the checkout
(scripts/install_ray), started with `ray start --head --block` as a child of the test session,
every address it can be told of set to loopback, usage reporting off, its files in a short
temporary folder. `address` is its dashboard (the Jobs API)."""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path
from types import TracebackType

from mcp_rl.ports import allocate_ports
from tests.kit.service import ServiceProcess

REPO = Path(__file__).resolve().parents[2]
READY_DEADLINE_S = 300.0  # `ray start --head` took 45 s on a loaded 2-core machine


def ray_venv() -> Path:
    """The venv with Ray, made by the project's script on first use (a no-op afterwards)."""
    out = subprocess.run(
        [str(REPO / "scripts" / "install_ray")], capture_output=True, text=True, check=True, timeout=1800
    ).stdout
    return Path(out.strip().splitlines()[-1])


class RayHead:
    def __init__(self) -> None:
        self.address = ""
        self._service: ServiceProcess | None = None
        # Ray's unix sockets live under its temp dir: the path must stay short.
        self._tmp = Path(tempfile.mkdtemp(prefix="ray-", dir="/tmp"))

    def __enter__(self) -> RayHead:
        ray = ray_venv() / "bin" / "ray"
        gcs, dashboard, client, manager, store, agent_grpc, agent_http, metrics, runtime_env = allocate_ports(9)
        self.address = f"http://127.0.0.1:{dashboard}"
        env = {
            **os.environ,
            "RAY_USAGE_STATS_ENABLED": "0",  # never reports anywhere
            "RAY_DISABLE_DOCKER_CPU_WARNING": "1",
        }
        argv = [
            str(ray),
            "start",
            "--head",
            "--block",
            "--disable-usage-stats",
            "--node-ip-address=127.0.0.1",
            f"--port={gcs}",
            "--dashboard-host=127.0.0.1",
            f"--dashboard-port={dashboard}",
            f"--ray-client-server-port={client}",
            f"--node-manager-port={manager}",
            f"--object-manager-port={store}",
            f"--dashboard-agent-grpc-port={agent_grpc}",
            f"--dashboard-agent-listen-port={agent_http}",
            f"--metrics-export-port={metrics}",
            f"--runtime-env-agent-port={runtime_env}",
            "--num-cpus=2",
            "--num-gpus=0",
            f"--temp-dir={self._tmp}",
        ]
        # `ray start --block` ends the processes it started when it is told to stop.
        self._service = ServiceProcess("the Ray head", argv, env, self._tmp / "ray-start.log")
        self._service.start(f"{self.address}/api/version", READY_DEADLINE_S)
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        if self._service is not None:
            self._service.stop()
