"""SkyRL's Tinker API server (PyPI `skyrl` 0.4.0, JAX backend on the CPU) serving a local model
folder, for the opt-in self-hosted test. Built by scripts/install_skyrl in a Python 3.12 venv
outside the checkout; started as SkyRL's own docs start it, under `uv run` (its engine re-spawns
itself through uv); its database and checkpoints in a temporary folder of the test's."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from types import TracebackType

from mcp_rl.ports import allocate_ports
from tests.kit.service import ServiceProcess

REPO = Path(__file__).resolve().parents[2]
VERSION = "0.4.0"
READY_DEADLINE_S = 600.0  # healthy after ~50 s on an idle 2-core machine (JAX start-up)
# Adapters: the training model plus one per sampler it saves (3 steps, the base's held-out
# evaluation and the trained model's); SkyRL holds a slot until its session times out.
BACKEND_CONFIG = {
    "max_lora_adapters": 8,
    "max_lora_rank": 8,
    "train_micro_batch_size": 4,
    "sample_max_num_sequences": 8,
}


def skyrl_venv() -> Path:
    """The venv with SkyRL, made by the project's script on first use (a no-op afterwards)."""
    out = subprocess.run(
        [str(REPO / "scripts" / "install_skyrl")], capture_output=True, text=True, check=True, timeout=3600
    ).stdout
    return Path(out.strip().splitlines()[-1])


class SkyrlServer:
    def __init__(self, model: Path, folder: Path) -> None:
        self.model = model
        self.folder = folder
        self.base_url = ""
        self.log = folder / "skyrl.log"
        self._service: ServiceProcess | None = None

    def __enter__(self) -> SkyrlServer:
        venv = skyrl_venv()
        (port,) = allocate_ports(1)
        self.base_url = f"http://127.0.0.1:{port}"
        argv = [
            str(venv / "bin" / "uv"),
            "run",
            "--no-project",
            "-m",
            "skyrl.tinker.api",
            "--host=127.0.0.1",
            f"--port={port}",
            f"--base-model={self.model}",
            "--backend=jax",
            f"--backend-config={json.dumps(BACKEND_CONFIG)}",
            f"--database-url=sqlite:///{self.folder / 'tinker.db'}",
            f"--checkpoints-base={self.folder / 'checkpoints'}",
        ]
        env = {**os.environ, "VIRTUAL_ENV": str(venv), "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}"}
        # Its session is ours: uv, the server and the engine it spawned end together.
        self._service = ServiceProcess("SkyRL's Tinker API", argv, env, self.log, cwd=self.folder)
        self._service.start(f"{self.base_url}/api/v1/healthz", READY_DEADLINE_S)
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        if self._service is not None:
            self._service.stop()
