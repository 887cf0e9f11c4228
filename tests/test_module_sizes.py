"""No module of the environment and supervisor packages grows past what one reader holds (issue 46:
a 788-line run service doing four jobs and a 715-line registry were split by job)."""

from __future__ import annotations

from pathlib import Path

import mcp_rl

PACKAGE = Path(mcp_rl.__file__).parent
LIMIT = 500
PACKAGES = ("environments", "supervisor")


def oversized(root: Path, limit: int = LIMIT) -> dict[str, int]:
    sizes = {
        p.relative_to(root).as_posix(): len(p.read_text(encoding="utf-8").splitlines()) for p in root.rglob("*.py")
    }
    return {name: n for name, n in sorted(sizes.items()) if n > limit}


def test_no_environment_or_supervisor_module_is_over_the_limit() -> None:
    found = {name: n for package in PACKAGES for name, n in oversized(PACKAGE / package).items()}
    assert found == {}, f"modules over {LIMIT} lines (split them by job): {found}"


def test_the_size_check_sees_a_long_module(tmp_path: Path) -> None:
    (tmp_path / "long.py").write_text("x = 1\n" * (LIMIT + 1))
    (tmp_path / "short.py").write_text("x = 1\n" * LIMIT)
    assert oversized(tmp_path) == {"long.py": LIMIT + 1}
