"""Finding Atropos environments without importing them.

Environment modules are heavy (they import atroposlib, transformers, datasets) and some have side
effects at import time, so discovery only parses source: an AST scan for classes that derive from
`BaseEnv`, directly or through another class of the same file. Importing happens later, in a
child process, only for the one environment the agent selects (see `introspect`).
"""

from __future__ import annotations

import ast
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel

BASE_CLASS = "BaseEnv"
# Markers of a project root: config_init() of some environments reads files relative to it.
_ROOT_MARKERS = ("pyproject.toml", "setup.py", "setup.cfg", ".git")


class EnvironmentInfo(BaseModel):
    """One environment class found on disk."""

    name: str
    class_name: str
    file_path: Path
    description: str
    source_dir: Path
    project_root: Path
    # Config edits applied on select: a virtual entry (a GEM id) is the bundled gem env with
    # its `env_id` preset (see gem_catalog).
    preset: dict[str, Any] | None = None


class ParseProblem(BaseModel):
    """A file that looked like an environment module but could not be read or parsed."""

    file_path: Path
    error: str


class DuplicateName(BaseModel):
    """Two classes claim the same environment name; the first one found wins and this says so."""

    name: str
    used: Path
    ignored: list[Path]


class Catalog(BaseModel):
    environments: list[EnvironmentInfo]
    problems: list[ParseProblem]
    duplicates: list[DuplicateName]
    searched: list[Path]

    def get(self, name: str) -> EnvironmentInfo | None:
        for env in self.environments:
            if env.name == name:
                return env
        return None

    @property
    def names(self) -> list[str]:
        return [env.name for env in self.environments]


@dataclass
class ScanCache:
    """Parsed files keyed by (path, mtime_ns, size): a warm listing re-parses only what changed."""

    entries: dict[Path, tuple[tuple[int, int], list[EnvironmentInfo] | ParseProblem]] = field(default_factory=dict)


def project_root(path: Path) -> Path:
    """The nearest folder above `path` that looks like a project root, else the file's folder."""
    start = path.parent
    for folder in (start, *start.parents):
        if any((folder / marker).exists() for marker in _ROOT_MARKERS):
            return folder
    return start


def _docstring_line(node: ast.AST) -> str:
    doc = ast.get_docstring(node)  # type: ignore[arg-type]
    if not doc:
        return ""
    return doc.strip().splitlines()[0].strip()


def _base_names(cls: ast.ClassDef) -> list[str]:
    names = []
    for base in cls.bases:
        if isinstance(base, ast.Name):
            names.append(base.id)
        elif isinstance(base, ast.Attribute):
            names.append(base.attr)
    return names


def _name_attribute(cls: ast.ClassDef) -> str | None:
    """The class attribute `name = "..."` that Atropos uses as the environment's name."""
    for stmt in cls.body:
        targets: list[ast.expr] = []
        value: ast.expr | None = None
        if isinstance(stmt, ast.Assign):
            targets, value = stmt.targets, stmt.value
        elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
            targets, value = [stmt.target], stmt.value
        for target in targets:
            if isinstance(target, ast.Name) and target.id == "name":
                if isinstance(value, ast.Constant) and isinstance(value.value, str) and value.value:
                    return value.value
    return None


def parse_file(path: Path) -> list[EnvironmentInfo]:
    """Environment classes defined in one file (raises SyntaxError/OSError/ValueError)."""
    source = path.read_text(encoding="utf-8")
    tree = ast.parse(source, filename=str(path))
    classes = [node for node in tree.body if isinstance(node, ast.ClassDef)]
    env_classes: set[str] = set()
    # Fixed point: a class is an environment if a base is BaseEnv or another env class here.
    changed = True
    while changed:
        changed = False
        for cls in classes:
            if cls.name not in env_classes and any(b == BASE_CLASS or b in env_classes for b in _base_names(cls)):
                env_classes.add(cls.name)
                changed = True
    module_doc = _docstring_line(tree)
    root = project_root(path)
    found = []
    for cls in classes:
        if cls.name not in env_classes:
            continue
        found.append(
            EnvironmentInfo(
                name=_name_attribute(cls) or path.stem,
                class_name=cls.name,
                file_path=path,
                description=_docstring_line(cls) or module_doc,
                source_dir=path.parent,
                project_root=root,
            )
        )
    return found


def _candidate_files(folder: Path) -> list[Path]:
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except OSError:
        return []
    return [
        Path(entry.path).resolve()
        for entry in entries
        if entry.name.endswith(".py") and not entry.name.startswith("_") and entry.is_file()
    ]


def scan(folders: list[Path], cache: ScanCache | None = None) -> Catalog:
    """Scan folders (non-recursively, like the original) for environment classes."""
    cache = cache if cache is not None else ScanCache()
    environments: list[EnvironmentInfo] = []
    problems: list[ParseProblem] = []
    seen: dict[str, EnvironmentInfo] = {}
    shadowed: dict[str, list[Path]] = {}
    searched: list[Path] = []
    for folder in folders:
        folder = folder.expanduser().resolve()
        searched.append(folder)
        if not folder.is_dir():
            problems.append(ParseProblem(file_path=folder, error="not a folder (check MCP_RL_ENV_PATHS)"))
            continue
        for path in _candidate_files(folder):
            result = _parse_cached(path, cache)
            if isinstance(result, ParseProblem):
                problems.append(result)
                continue
            for env in result:
                if env.name in seen:
                    shadowed.setdefault(env.name, []).append(env.file_path)
                    continue
                seen[env.name] = env
                environments.append(env)
    duplicates = [DuplicateName(name=name, used=seen[name].file_path, ignored=paths) for name, paths in shadowed.items()]
    return Catalog(environments=environments, problems=problems, duplicates=duplicates, searched=searched)


def _parse_cached(path: Path, cache: ScanCache) -> list[EnvironmentInfo] | ParseProblem:
    try:
        stat = path.stat()
    except OSError as exc:
        return ParseProblem(file_path=path, error=str(exc))
    key = (stat.st_mtime_ns, stat.st_size)
    hit = cache.entries.get(path)
    if hit is not None and hit[0] == key:
        return hit[1]
    result: list[EnvironmentInfo] | ParseProblem
    try:
        result = parse_file(path)
    except SyntaxError as exc:
        result = ParseProblem(file_path=path, error=f"syntax error at line {exc.lineno}: {exc.msg}")
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        result = ParseProblem(file_path=path, error=f"{type(exc).__name__}: {exc}")
    cache.entries[path] = (key, result)
    return result
