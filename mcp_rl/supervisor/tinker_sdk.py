"""Which tinker SDK a run's trainer speaks, and that SDK on its path.

Hosted Tinker refuses old SDKs; self-hosted Tinker-compatible servers (SkyRL's Tinker API, TuFT)
speak 0.25, which differs from today's 0.38 at the wire (0.38 asserts `sample_sequence_ids`,
resumes in one load_weights call with the session id, sets checkpoint TTLs through REST). The
installed SDK (0.38) serves hosted Tinker; an older one is installed on first use (`pip install
--no-deps --target`, its dependencies are the installed SDK's own) into a folder of its own under
the state directory, and put first on the trainer's PYTHONPATH. `auto` asks the server: one that
serves `client/dynamic_config` is today's Tinker, one that answers 404 there speaks 0.25.
"""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path
from typing import Literal

import httpx

from mcp_rl.locking import LockTimeout, exclusive_lock

log = logging.getLogger(__name__)

SdkChoice = Literal["auto", "0.38", "0.25"]
# The released SDK of each dialect.
PINS = {"0.38": "0.38.0", "0.25": "0.25.0"}
INSTALLED = "0.38"
PROBE_TIMEOUT_S = 15.0
INSTALL_TIMEOUT_S = 600.0


def resolve(choice: str, base_url: str | None, api_key: str | None) -> str:
    """The dialect to speak: as chosen, or (auto) today's for hosted Tinker and what a
    self-hosted server answers to `client/dynamic_config`."""
    if choice != "auto":
        return choice
    if not base_url:
        return INSTALLED
    try:
        with httpx.Client(timeout=PROBE_TIMEOUT_S, trust_env=False) as client:
            answer = client.post(
                f"{base_url.rstrip('/')}/api/v1/client/dynamic_config", json={}, headers={"X-API-Key": api_key or ""}
            )
    except httpx.HTTPError as exc:
        log.warning("could not ask %s which Tinker SDK it speaks (%s); using %s", base_url, exc, INSTALLED)
        return INSTALLED
    return "0.25" if answer.status_code in (404, 405) else INSTALLED


def sdk_path(dialect: str, cache: Path) -> Path | None:
    """The folder to put first on the trainer's PYTHONPATH for `dialect` (None: the installed
    SDK), installed on first use; raises RuntimeError with pip's words when it cannot be."""
    if dialect == INSTALLED:
        return None
    version = PINS[dialect]
    target = cache / f"tinker-{version}"
    if (target / ".complete").is_file():
        return target
    cache.mkdir(parents=True, exist_ok=True)
    try:
        # one install per folder; the others wait for it (at most one install's deadline)
        with exclusive_lock(cache / f".tinker-{version}.lock", timeout_s=INSTALL_TIMEOUT_S + PROBE_TIMEOUT_S):
            if (target / ".complete").is_file():
                return target
            argv = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-deps"]
            argv += ["--target", str(target), "--upgrade", f"tinker=={version}"]
            try:
                done = subprocess.run(argv, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S, check=False)
            except subprocess.TimeoutExpired as exc:
                raise RuntimeError(f"installing tinker=={version} took longer than {INSTALL_TIMEOUT_S:g} s") from exc
            if done.returncode != 0:
                raise RuntimeError(f"could not install tinker=={version} into {target}: {done.stderr.strip()[-800:]}")
            (target / ".complete").touch()
    except LockTimeout as exc:
        raise RuntimeError(f"another install of tinker=={version} into {target} did not finish in time") from exc
    return target
