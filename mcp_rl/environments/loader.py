"""Importing an environment class from its file, the way every child process needs it.

Used inside child processes only (config introspection, the environment runner): importing an
environment pulls in atroposlib and whatever the environment needs, and may have side effects.
The module is loaded under a private name (never `__main__`, so its own `cli()` call at the
bottom does not fire), with its folder and its project root importable and the project root as
the working directory (some `config_init()`s read files relative to it).
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any


def load_module(file_path: Path, project_root: Path) -> ModuleType:
    file_path = Path(file_path).resolve()
    for folder in (str(file_path.parent), str(Path(project_root).resolve())):
        if folder not in sys.path:
            sys.path.insert(0, folder)
    os.chdir(project_root)
    module_name = f"mcp_rl_env_{file_path.stem}"
    spec = importlib.util.spec_from_file_location(module_name, file_path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {file_path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


def load_env_class(file_path: Path, class_name: str, project_root: Path) -> Any:
    """The environment class itself: the one named, defined in that file (not an imported one)."""
    module = load_module(file_path, project_root)
    cls = getattr(module, class_name, None)
    if cls is None or getattr(cls, "__module__", None) != module.__name__:
        raise ImportError(f"{file_path} defines no class {class_name!r}")
    return cls
