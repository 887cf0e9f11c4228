"""verifiers' harness finds the `uv` installed beside verifiers and uses the machine's package
index and CA settings (mcp_rl.environments.uv_setup), on a machine with no uv on PATH and an
empty HOME: nothing lands in ~/.local/bin."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

from mcp_rl.environments.uv_setup import check_sync, harness_env, pip_settings, uv_environment
from mcp_rl.settings import Settings

# verifiers 0.4.0's own bootstrap of uv (verifiers/v1/runtimes/base.py `_ENSURE_UV`, its pip and
# installer fallbacks left out: reaching them is the failure this guards against).
ENSURE_UV = (
    'export PATH="$HOME/.local/bin:$PATH" UV_INSTALL_DIR="$HOME/.local/bin"; '
    "uv_supports_scripts() { "
    "uv sync --help 2>/dev/null | grep -q -- '--script' "
    "&& uv python find --help 2>/dev/null | grep -q -- '--script'; }; "
    "uv_supports_scripts || { echo 'would install uv into ~/.local/bin' >&2; exit 3; }"
)
FAKE_UV = '#!/bin/sh\necho "usage: uv $1 [--script SCRIPT]"\n'


def _family(tmp_path: Path) -> tuple[Path, Path]:
    """A family folder whose venv has a python and a `uv` (a stand-in answering --help)."""
    folder = tmp_path / "fam" / "verifiers-0.4.0"
    bin_dir = folder / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "python").symlink_to(sys.executable)
    uv = bin_dir / "uv"
    uv.write_text(FAKE_UV)
    uv.chmod(uv.stat().st_mode | stat.S_IEXEC)
    return folder, bin_dir / "python"


def _bare_env(home: Path, **extra: str) -> dict[str, str]:
    # No uv anywhere on this PATH (only the system's tools), an empty HOME.
    return {"HOME": str(home), "PATH": "/usr/bin:/bin", **extra}


def test_the_harness_finds_our_uv_and_writes_nothing_to_home(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    folder, python = _family(tmp_path)
    env = harness_env(folder, python, _bare_env(home))
    assert env["PATH"].split(os.pathsep)[0] == str(python.parent)
    done = subprocess.run(
        ["sh", "-c", f"{ENSURE_UV}; command -v uv"], env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(python.parent / "uv")
    assert list(home.iterdir()) == []  # no ~/.local/bin, no ~/.cache
    assert env["UV_CACHE_DIR"].startswith(str(folder)) and env["UV_PYTHON_INSTALL_DIR"].startswith(str(folder))
    assert env["PYTHONUSERBASE"].startswith(str(folder))


def test_pips_index_and_ca_settings_reach_uv(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    cert = tmp_path / "ca.pem"
    cert.write_text("-----BEGIN CERTIFICATE-----\n")
    conf = tmp_path / "pip.conf"
    conf.write_text(
        "[global]\nindex-url = https://mirror.example/simple\n"
        f"extra-index-url = https://extra.example/simple file:///nowhere/simple\nfind-links = {wheels}\n"
    )
    env = _bare_env(home, PIP_CONFIG_FILE=str(conf), PIP_CERT=str(cert))
    pip = pip_settings(env=env)
    assert pip["index-url"] == "https://mirror.example/simple" and pip["cert"] == str(cert)
    carried = uv_environment(pip, env)
    assert carried == {
        "UV_DEFAULT_INDEX": "https://mirror.example/simple",
        "UV_INDEX": "https://extra.example/simple",  # the missing local index left out, as pip does
        "UV_FIND_LINKS": str(wheels),
        "SSL_CERT_FILE": str(cert),
    }
    # The user's own uv settings win.
    mine = uv_environment(pip, {**env, "UV_INDEX_URL": "https://mine/simple", "SSL_CERT_FILE": "/etc/mine.pem"})
    assert "UV_DEFAULT_INDEX" not in mine and "SSL_CERT_FILE" not in mine
    folder, python = _family(tmp_path)
    worker = harness_env(folder, python, env)
    assert worker["UV_DEFAULT_INDEX"] == "https://mirror.example/simple" and worker["SSL_CERT_FILE"] == str(cert)


def test_the_sync_check_says_when_uv_is_missing(tmp_path: Path) -> None:
    folder, python = _family(tmp_path)
    (python.parent / "uv").unlink()
    env = _bare_env(tmp_path)
    ok, detail = check_sync(Settings.from_env(env), folder, python, env)
    assert not ok and "no uv beside verifiers" in detail


def test_the_sync_check_runs_as_a_child_under_control_and_says_why_it_failed(tmp_path: Path) -> None:
    # The family's python here has no verifiers: the probe fails on its import, and the check
    # says so from the child's bounded stderr (mcp_rl.environments.child), leaving no record.
    folder, python = _family(tmp_path)
    env = _bare_env(tmp_path)
    settings = Settings.from_env(env)
    ok, detail = check_sync(settings, folder, python, env)
    assert not ok and "could not sync the chat program" in detail and "verifiers" in detail, detail
    assert not any((settings.home / "children").glob("*.json"))
