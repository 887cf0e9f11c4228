"""Family interpreters (verifiers, openenv): made under the state directory, reported by the
doctor, a failed build kept with pip's error; mcp-rl's own interpreter never imports them."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from mcp_rl.environments import families
from mcp_rl.environments.families import BuildState, Family, FamilyBuildError
from mcp_rl.settings import Settings
from tests.conftest import REPO, make_env


def test_nothing_is_made_until_asked_and_the_doctor_says_so(home: Path) -> None:
    from mcp_rl.doctor import check_families

    settings = Settings.from_env(make_env(home))
    assert [s.state for s in families.all_statuses(settings)] == [BuildState.ABSENT, BuildState.ABSENT]
    assert families.key(Family.VERIFIERS) == "verifiers-0.4.0"
    assert families.key(Family.OPENENV) == "openenv-0.10.0"
    check = check_families(settings)
    assert "verifiers (verifiers==0.4.0, uv==0.13.9): not made yet" in check.detail
    with pytest.raises(FamilyBuildError, match="not made yet.*families build openenv"):
        families.interpreter(settings, Family.OPENENV)
    assert not (home / "families").exists()


def test_a_failed_build_keeps_the_cause_and_is_never_used(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mcp_rl.doctor import Status, check_families

    # Offline on purpose: no index, a package that exists nowhere.
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path))
    monkeypatch.setitem(families.PINS, Family.OPENENV, ("mcp-rl-no-such-package==0.0.0",))
    settings = Settings.from_env(make_env(home, MCP_RL_FAMILIES_DIR=str(tmp_path / "fam")))
    with pytest.raises(FamilyBuildError, match="installing mcp-rl-no-such-package==0.0.0 failed"):
        families.build(settings, Family.OPENENV, deadline_s=120)
    st = families.status(settings, Family.OPENENV)
    assert st.state is BuildState.FAILED and "mcp-rl-no-such-package" in st.detail
    assert st.folder == tmp_path / "fam" / "openenv-0.10.0"
    with pytest.raises(FamilyBuildError, match="making it failed"):
        families.interpreter(settings, Family.OPENENV)
    check = check_families(settings)
    assert check.status is Status.WARN and "families build openenv" in (check.fix or "")


def test_a_build_past_its_deadline_fails_with_that_cause(home: Path, tmp_path: Path) -> None:
    settings = Settings.from_env(make_env(home, MCP_RL_FAMILIES_DIR=str(tmp_path / "fam")))
    with pytest.raises(FamilyBuildError, match="deadline"):
        families.build(settings, Family.VERIFIERS, deadline_s=0.01)
    assert families.status(settings, Family.VERIFIERS).state is BuildState.FAILED


def test_mcp_rls_own_interpreter_never_imports_verifiers_or_openenv(home: Path) -> None:
    """The server lists and selects environments, the doctor runs: neither family is imported
    (they cannot be: verifiers pins mcp==2.0.0, openenv needs mcp<2)."""
    code = textwrap.dedent(
        """
        import sys, anyio
        from mcp import Client
        from mcp_rl.server import build_server
        from mcp_rl.doctor import run_checks
        import mcp_rl.environments.families
        async def main():
            async with Client(build_server()) as c:
                await c.list_tools()
                await c.call_tool("rl_list_environments", {})
        anyio.run(main)
        run_checks(dict(__import__("os").environ), offline=True)
        print(",".join(m for m in sys.modules if m.split(".")[0] in ("verifiers", "openenv", "openenv_core")))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=make_env(home), cwd=REPO, timeout=180
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == ""
