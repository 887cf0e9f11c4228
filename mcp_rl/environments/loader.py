"""Importing an environment class from its file, the way every child process needs it.

Used inside child processes only (config introspection, the environment runner of runs and smoke
tests): importing an environment pulls in atroposlib and whatever the environment needs, and may
have side effects. One set of rules for all of them, so an environment that selects also runs:

- A file inside a package (folders with `__init__.py`, or a file using relative imports) is
  imported as part of its package, by its dotted name, with the package's parent first on
  sys.path: `from .utils import x` works as when its authors ran `python -m pkg.env`.
- A plain file is imported under a private name (never `__main__`, so its own `cli()` call at
  the bottom does not fire).
- Its own folder and its project root are importable too (after everything else: scripts that
  import siblings by plain name), and the project root is the working directory (some
  `config_init()`s read `configs/*.yaml` relative to it).
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from mcp_rl.task import Task


def _relative_import_depth(file_path: Path) -> int:
    """The deepest relative import of the file (`from ..x import y` is 2), 0 for none."""
    try:
        tree = ast.parse(file_path.read_bytes(), filename=str(file_path))
    except (OSError, SyntaxError, ValueError):
        return 0
    return max((n.level for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)), default=0)


def package_location(file_path: Path) -> tuple[Path, str] | None:
    """(the folder to put on sys.path, the module's dotted name) when the file belongs to a
    package, else None. Regular packages are found by walking up `__init__.py` files; a file
    whose relative imports reach higher is taken as part of a namespace package that deep
    as its relative imports require."""
    file_path = Path(file_path).resolve()
    parts = [file_path.stem]
    folder = file_path.parent
    while (folder / "__init__.py").is_file() and folder.parent != folder:
        parts.insert(0, folder.name)
        folder = folder.parent
    needed = _relative_import_depth(file_path)
    while len(parts) - 1 < needed and folder.parent != folder:
        parts.insert(0, folder.name)
        folder = folder.parent
    if len(parts) == 1:
        return None
    return folder, ".".join(parts)


def load_module(file_path: Path, project_root: Path, chdir: bool = True) -> ModuleType:
    """The module of `file_path`; `chdir=False` leaves the working directory alone (a process
    that only reads a task's items, such as the trainer)."""
    file_path = Path(file_path).resolve()
    project_root = Path(project_root).resolve()
    for folder in (str(file_path.parent), str(project_root)):
        if folder not in sys.path:
            sys.path.append(folder)
    if chdir:
        os.chdir(project_root)
    location = package_location(file_path)
    if location is not None:
        search_root, dotted = location
        sys.path.insert(0, str(search_root))
        module = importlib.import_module(dotted)
        loaded = Path(getattr(module, "__file__", "") or "").resolve()
        if loaded != file_path:
            top = dotted.split(".")[0]
            raise ImportError(
                f"{dotted} resolved to {loaded}, not {file_path}: the package name {top!r} clashes with "
                "an installed module. Rename the environment's package folder."
            )
        return module
    module_name = f"mcp_rl_env_{file_path.stem}"
    spec = importlib.util.spec_from_file_location(module_name, file_path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {file_path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


def load_class(file_path: Path, class_name: str, project_root: Path, chdir: bool = True) -> Any:
    """The class named, defined in that file (not an imported one), as the file defines it."""
    module = load_module(file_path, project_root, chdir=chdir)
    cls = getattr(module, class_name, None)
    if cls is None or getattr(cls, "__module__", None) != module.__name__:
        raise ImportError(f"{file_path} defines no class {class_name!r}")
    return cls


def load_env_class(file_path: Path, class_name: str, project_root: Path) -> Any:
    """The environment class itself: the Atropos class named, or the environment made from the
    task class named (mcp_rl.task)."""
    cls = load_class(file_path, class_name, project_root)
    if isinstance(cls, type) and issubclass(cls, Task):
        # atroposlib comes with the task runner: imported only by processes that run environments
        from mcp_rl.environments.task_env import env_class_for

        return env_class_for(cls, Path(file_path))
    return cls


def load_task(file_path: Path, class_name: str, project_root: Path) -> Task:
    """An instance of the task class named (working directory unchanged; no atroposlib)."""
    cls = load_class(file_path, class_name, project_root, chdir=False)
    if not (isinstance(cls, type) and issubclass(cls, Task)):
        raise ImportError(f"{class_name} in {file_path} is not a mcp_rl.task.Task subclass")
    return cls()
