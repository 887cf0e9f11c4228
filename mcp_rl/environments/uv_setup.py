"""The `uv` of verifiers' harness, kept inside mcp-rl's folders and pointed at the machine's
package index and CA bundle.

verifiers' harnesses sync their chat program with `uv sync --script` (verifiers.v1.runtimes.base
`_ENSURE_UV`): a `uv` found on PATH is used; without one it runs `pip install --user uv` and then
the installer from astral.sh, both into `~/.local/bin`. mcp-rl installs `uv` beside verifiers in
the family's venv (families.PINS), so the worker's environment (`harness_env`):

    PATH              the family venv's bin first: verifiers finds that `uv` and installs none
    UV_CACHE_DIR,     uv's cache and any Python it fetches for a script, in the family's folder
    UV_PYTHON_INSTALL_DIR
    PYTHONUSERBASE    a `pip install --user` fallback would land in the family's folder, not ~/.local

and the machine's package-index and CA settings as pip has them (`pip config list`: pip.conf's
files and PIP_* variables, the last scope winning as in pip) carried to uv, unless a UV_* (or
SSL_CERT_FILE) of the user's is already set:

    index-url        -> UV_DEFAULT_INDEX
    extra-index-url  -> UV_INDEX          (space-separated, as uv takes it)
    find-links       -> UV_FIND_LINKS     (comma-separated, as uv takes it)
    cert             -> SSL_CERT_FILE     (uv's own trust roots otherwise ignore the machine's CA)

A local path (file:// URL or folder) that does not exist is left out, as pip ignores it.
`check_sync` runs the harness's own sync of its chat program with that environment (doctor).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import unquote, urlparse

from mcp_rl.environments.child import run_child
from mcp_rl.settings import Settings

PIP_CONFIG_TIMEOUT_S = 30.0
SYNC_TIMEOUT_S = 600.0
# pip's option -> (uv's variable, uv's separator); the user's own variables that already say it.
CARRIED: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "index-url": ("UV_DEFAULT_INDEX", " ", ("UV_DEFAULT_INDEX", "UV_INDEX_URL")),
    "extra-index-url": ("UV_INDEX", " ", ("UV_INDEX", "UV_EXTRA_INDEX_URL")),
    "find-links": ("UV_FIND_LINKS", ",", ("UV_FIND_LINKS",)),
    "cert": ("SSL_CERT_FILE", " ", ("SSL_CERT_FILE",)),
}
_LINE = re.compile(r"^(?P<scope>[^.]*)\.(?P<key>[a-z-]+)='(?P<value>.*)'$")
# verifiers' harness syncs this program; the check syncs the same source the same way.
SYNC_PROBE = """
import pathlib, subprocess, sys, tempfile
from verifiers.v1.harnesses.utils.launch import CHAT_PROGRAM_SOURCE
source = CHAT_PROGRAM_SOURCE if isinstance(CHAT_PROGRAM_SOURCE, str) else CHAT_PROGRAM_SOURCE.decode()
with tempfile.TemporaryDirectory() as folder:
    path = pathlib.Path(folder) / "chat_program.py"
    path.write_text(source)
    for argv in (["uv", "sync", "--script", str(path), "-q", "--no-config"],
                 ["uv", "python", "find", "--script", str(path), "--no-config"]):
        done = subprocess.run(argv, capture_output=True, text=True)
        if done.returncode != 0:
            sys.exit(" ".join(argv[:3]) + " failed: " + (done.stderr.strip()[-1500:] or "no output"))
print("synced")
"""


def pip_settings(python: str = sys.executable, env: Mapping[str, str] | None = None) -> dict[str, str]:
    """pip's effective options (its config files and PIP_* variables; the last scope pip lists
    wins, as in pip), from `pip config list`. {} when pip cannot say."""
    try:
        done = subprocess.run(
            [python, "-m", "pip", "config", "list"],
            capture_output=True,
            text=True,
            timeout=PIP_CONFIG_TIMEOUT_S,
            env=dict(env) if env is not None else None,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return {}
    found: dict[str, str] = {}
    for line in done.stdout.splitlines():
        match = _LINE.match(line.strip())
        if match and match["scope"] in ("global", "install", "download", ":env:", ""):
            found[match["key"]] = match["value"]
    return found


def _exists_if_local(location: str) -> bool:
    parsed = urlparse(location)
    if parsed.scheme == "file":
        return Path(unquote(parsed.path)).exists()
    if parsed.scheme in ("http", "https"):
        return True
    return Path(location).expanduser().exists()


def uv_environment(pip: Mapping[str, str], base: Mapping[str, str]) -> dict[str, str]:
    """uv's variables for pip's options, leaving alone any the user set in `base`."""
    out: dict[str, str] = {}
    for option, (variable, separator, already) in CARRIED.items():
        value = pip.get(option)
        if not value or any(base.get(name) for name in already):
            continue
        if option == "cert":
            if Path(value).expanduser().is_file():
                out[variable] = str(Path(value).expanduser())
            continue
        kept = [v for v in value.split() if _exists_if_local(v)]
        if kept:
            out[variable] = separator.join(kept)
    return out


def venv_bin(python: Path) -> Path:
    return Path(python).parent


def harness_env(family_folder: Path, python: Path, base: Mapping[str, str]) -> dict[str, str]:
    """The verifiers worker's environment: `base` with the family's `uv` first on PATH, uv's
    folders in the family's, and pip's index and CA settings carried to uv."""
    env = dict(base)
    env["PATH"] = os.pathsep.join([str(venv_bin(python)), *([base["PATH"]] if base.get("PATH") else [])])
    env.update(uv_environment(pip_settings(env=base), base))
    env.setdefault("UV_CACHE_DIR", str(family_folder / "uv-cache"))
    env.setdefault("UV_PYTHON_INSTALL_DIR", str(family_folder / "uv-python"))
    env["PYTHONUSERBASE"] = str(family_folder / "user-base")
    return env


def check_sync(settings: Settings, family_folder: Path, python: Path, base: Mapping[str, str]) -> tuple[bool, str]:
    """Sync the harness's chat program as the harness does (uv sync --script), with the worker's
    environment (the user-code allow-list of `base`: no key of ours): (True, what was used) or
    (False, why not). A child under control (mcp_rl.environments.child): a `uv` it started
    ends with it, at the deadline too."""
    env = harness_env(family_folder, python, settings.user_code_env(base=base))
    uv = venv_bin(python) / "uv"
    if not uv.is_file():
        return False, f"no uv beside verifiers at {uv}: make the family again"
    carried = ", ".join(
        f"{k}={env[k]}" for k in ("UV_DEFAULT_INDEX", "UV_INDEX", "UV_FIND_LINKS", "SSL_CERT_FILE") if k in env
    )
    done = run_child(
        settings,
        None,
        ["-c", SYNC_PROBE],
        env=env,
        timeout_s=SYNC_TIMEOUT_S,
        what="syncing verifiers' chat program (doctor)",
        python=python,
    )
    if done.timed_out:
        return (
            False,
            f"syncing the chat program took over {SYNC_TIMEOUT_S:.0f} s (uv {uv}; {carried or 'no index settings'})",
        )
    if done.returncode != 0:
        why = (done.stderr.text().strip() or done.stdout.text().strip())[-800:]
        return False, f"uv {uv} could not sync the chat program ({carried or 'no index settings'}): {why}"
    return True, f"uv {uv} synced the chat program ({carried or 'uv defaults'})"
