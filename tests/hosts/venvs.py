"""Virtual environments for host client code from PyPI (Hermes Agent), made by the test tier that
needs them: one per requirement, reused across sessions, never this project's own venv (a host's
dependencies, e.g. its own mcp SDK version, must not mix with ours)."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from pathlib import Path

from tests.hosts.clients import unavailable

# Outside the checkout and the test's temporary folders, so a second session reuses it.
VENVS_DIR = Path(os.environ.get("MCP_RL_TEST_VENVS", Path.home() / ".cache" / "mcp-rl-test-venvs"))
INSTALL_TIMEOUT_S = 600


def host_venv(name: str, requirement: str) -> Path:
    """The Python of a venv holding `requirement`, created once; skips the test (with the reason)
    when it cannot be installed (no index reachable, no wheel for this Python), and fails it in CI
    (CI=true)."""
    folder = VENVS_DIR / name
    python = folder / "bin" / "python"
    marker = folder / ".installed"
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(folder.parent / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two sessions at once: one installs, the other waits
        if marker.is_file() and marker.read_text() == requirement and python.exists():
            return python
        steps = [
            [sys.executable, "-m", "venv", "--clear", str(folder)],
            [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", requirement],
        ]
        for argv in steps:
            try:
                done = subprocess.run(argv, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                unavailable(f"installing {requirement} took more than {INSTALL_TIMEOUT_S} s")
            if done.returncode != 0:
                tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
                unavailable(f"could not install {requirement} into {folder}: {' | '.join(tail)}")
        marker.write_text(requirement)
    return python
