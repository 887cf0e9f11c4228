"""verifiers v1 tasksets on MCP_RL_ENV_PATHS, listed as `verifiers:<id>`.

A taskset is a module or package that exports one `Taskset` subclass; its id is the module's
name, as verifiers' own loader takes it (`owner/name@version` -> `name`, `-` -> `_`). Found by
reading source only (verifiers cannot be imported here: it pins mcp==2.0.0): a module that
imports verifiers and subclasses `Taskset`. An entry is virtual: the bundled `verifiers_env.py`
with `taskset` and `taskset_paths` preset.
"""

from __future__ import annotations

import re
from pathlib import Path

from mcp_rl.environments.discovery import SKIP_DIRS, EnvironmentInfo

PREFIX = "verifiers:"
ENV_FILE = "verifiers_env.py"
_IMPORTS = re.compile(r"^\s*(?:import|from)\s+verifiers\b", re.MULTILINE)
_TASKSET = re.compile(r"class\s+\w+\s*\([^)]*Taskset\b")


def taskset_id(name: str) -> str:
    """verifiers' module name for a taskset id."""
    return name.rsplit("/", 1)[-1].split("@", 1)[0].replace("-", "_").lower()


def _is_taskset(source: Path) -> bool:
    try:
        text = source.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    return bool(_IMPORTS.search(text) and _TASKSET.search(text))


def find_tasksets(roots: list[Path]) -> list[tuple[str, Path]]:
    """(id, folder to put on sys.path) of every taskset module directly in a root."""
    found: dict[str, Path] = {}
    for root in roots:
        if not root.is_dir():
            continue
        for child in sorted(root.iterdir()):
            if child.name.startswith((".", "_")) or child.name in SKIP_DIRS:
                continue
            if child.is_dir() and (child / "__init__.py").is_file():
                sources = [child / "__init__.py", *sorted(child.glob("*.py"))]
                if any(_is_taskset(s) for s in sources):
                    found.setdefault(taskset_id(child.name), root.resolve())
            elif child.suffix == ".py" and _is_taskset(child):
                found.setdefault(taskset_id(child.stem), root.resolve())
    return sorted(found.items())


def entries(base: EnvironmentInfo, roots: list[Path]) -> list[EnvironmentInfo]:
    return [
        base.model_copy(
            update={
                "name": PREFIX + ident,
                "select_name": PREFIX + ident,
                "qualified_name": None,
                "description": f"verifiers v1 taskset {ident} (in {folder}), rolled out in the verifiers interpreter.",
                "preset": {"taskset": ident, "taskset_paths": str(folder)},
            }
        )
        for ident, folder in find_tasksets(roots)
    ]
