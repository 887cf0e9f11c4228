"""Finding Atropos environments without importing them.

Environment modules are heavy (they import atroposlib, transformers, datasets) and some have side
effects at import time, so discovery only parses source: an AST scan for classes that derive from
`BaseEnv`, directly or through another class of the same file. Importing happens later, in a
child process, only for the one environment the agent selects (see `introspect`).

Each `MCP_RL_ENV_PATHS` entry is searched recursively (real repositories nest environments:
`environments/community/<name>/...`), shallow folders first, skipping what never holds an
environment (VCS data, virtualenvs, node_modules, caches, tests). A depth and a file-count limit
keep a mistaken entry (a home folder) from stalling the listing; hitting one is reported.
Names stay the environments' own `name`; when two share one, the shallowest (first found) keeps
the plain name and every one of them also gets a qualified name (`folder/name`).
"""

from __future__ import annotations

import ast
import os
import re
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel

from mcp_rl.environments.mcp_family.taskfile import named_variables

BASE_CLASS = "BaseEnv"
# atroposlib's own BaseEnv subclasses that environments derive from (the later upstream
# atroposlib has these; an environment using one then says so when selected), and mcp-rl's base
# of single-turn environments (mcp_rl.environments.single_turn: the bundled ones derive from it).
BASE_CLASSES = frozenset({BASE_CLASS, "StatefulToolEpisodeEnv", "TeacherDistillationEnv", "SingleTurnEnv"})
# A task file (mcp_rl.task) imports this module; its classes deriving from `Task` are tasks.
TASK_MODULE = "mcp_rl.task"
TASK_CLASS = "Task"
_BASE_BYTES = (*(name.encode() for name in BASE_CLASSES), TASK_MODULE.encode())
# Markers of a project root: config_init() of some environments reads files relative to it.
_ROOT_MARKERS = ("pyproject.toml", "setup.py", "setup.cfg", ".git")
# Folders that never hold an environment (plus any hidden folder and any virtualenv).
SKIP_DIRS = frozenset(
    {"node_modules", "__pycache__", "tests", "test", "site-packages", "dist-packages", "build", "dist"}
)
# Files that are never an environment module.
_SKIP_FILES = frozenset({"setup.py", "conftest.py", "noxfile.py"})
# Limits per MCP_RL_ENV_PATHS entry. The upstream Atropos environments tree is 4 levels deep
# with ~700 .py files; these leave room while keeping a mistaken entry from scanning a disk.
MAX_DEPTH = 8
MAX_FILES = 5000


class EnvironmentInfo(BaseModel):
    """One environment class found on disk."""

    name: str
    class_name: str
    file_path: Path
    description: str
    # "task": a mcp_rl.task.Task subclass (the runner makes it an Atropos environment);
    # "atropos": a BaseEnv subclass.
    kind: Literal["atropos", "task"] = "atropos"
    source_dir: Path
    project_root: Path
    # Config edits applied on select: a virtual entry (a GEM id) is the bundled gem env with
    # its `env_id` preset (see gem_catalog).
    preset: dict[str, Any] | None = None
    # Set when another environment has the same `name`: `folder/name`, selectable like a name.
    qualified_name: str | None = None
    # What to pass to rl_select_environment: the plain name, or the qualified name when the
    # plain name means another environment (the first one found).
    select_name: str = ""
    # Top-level modules imported at module level (absolute imports only), for a static check
    # of the environment's dependencies without importing it.
    imports: list[str] = []
    # The variables of the server's environment its code needs (its own `env_vars`, e.g. an API
    # key): the only ones beyond the allow-list that reach it (Settings.user_code_env).
    env_vars: list[str] = []


class ParseProblem(BaseModel):
    """A file that looked like an environment module but could not be read or parsed."""

    file_path: Path
    error: str


class DuplicateName(BaseModel):
    """Two classes claim the same environment name; the plain name means the first one found."""

    name: str
    used: Path
    ignored: list[Path]
    # Qualified names (selectable) of the one the plain name means and of the others.
    used_as: str = ""
    others_as: list[str] = []


class Catalog(BaseModel):
    environments: list[EnvironmentInfo]
    problems: list[ParseProblem]
    duplicates: list[DuplicateName]
    searched: list[Path]
    # Limits reached while searching (depth, file count): what was not searched and why.
    limits_hit: list[str] = []

    def get(self, name: str) -> EnvironmentInfo | None:
        """By select name (plain or qualified), then by qualified name."""
        for env in self.environments:
            if env.select_name == name:
                return env
        for env in self.environments:
            if env.qualified_name == name:
                return env
        return None

    @property
    def names(self) -> list[str]:
        return [env.select_name for env in self.environments]


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


_ENV_VAR_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _env_vars_attribute(cls: ast.ClassDef) -> list[str]:
    """The class attribute `env_vars = ("NAME", ...)` (a literal tuple or list of names): the
    variables the task or environment asks for. Read without importing, like `name`."""
    for stmt in cls.body:
        targets: list[ast.expr] = []
        value: ast.expr | None = None
        if isinstance(stmt, ast.Assign):
            targets, value = stmt.targets, stmt.value
        elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
            targets, value = [stmt.target], stmt.value
        if any(isinstance(t, ast.Name) and t.id == "env_vars" for t in targets) and isinstance(
            value, ast.Tuple | ast.List | ast.Set
        ):
            return [
                e.value
                for e in value.elts
                if isinstance(e, ast.Constant) and isinstance(e.value, str) and _ENV_VAR_NAME.match(e.value)
            ]
    return []


def declared_env_vars(file_path: Path, class_name: str, env_config: Mapping[str, Any] | None = None) -> list[str]:
    """The `env_vars` class `class_name` of `file_path` names (empty when none, or unreadable),
    plus, when its config (`env_config`) points `task_file` at an MCP task file, the variables
    that file names for its server: the environment process must hold them to pass them on."""
    names: list[str] = []
    try:
        tree = ast.parse(Path(file_path).read_bytes(), filename=str(file_path))
    except (OSError, SyntaxError, ValueError):
        tree = None
    for node in tree.body if tree is not None else []:
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            names = _env_vars_attribute(node)
            break
    task_file = (env_config or {}).get("task_file")
    if isinstance(task_file, str) and task_file.endswith(".mcp.yaml"):
        names += [n for n in named_variables(task_file) if n not in names]
    return names


def top_level_imports(tree: ast.Module) -> list[str]:
    """Top-level package names the module imports unconditionally (module body only: imports
    inside try/if blocks are optional ones, relative imports are the project's own)."""
    names: list[str] = []
    for stmt in tree.body:
        if isinstance(stmt, ast.Import):
            names += [alias.name.split(".")[0] for alias in stmt.names]
        elif isinstance(stmt, ast.ImportFrom) and stmt.level == 0 and stmt.module:
            names.append(stmt.module.split(".")[0])
    return sorted(set(names) - {"__future__"})


def _task_bases(tree: ast.Module) -> set[str]:
    """The names under which the file's classes may derive from mcp_rl.task.Task: `Task` (or
    its alias) imported from it, or `task.Task` / `mcp_rl.task.Task` after importing it."""
    names: set[str] = set()
    for stmt in tree.body:
        if isinstance(stmt, ast.ImportFrom) and stmt.level == 0 and stmt.module == TASK_MODULE:
            names.update(alias.asname or alias.name for alias in stmt.names if alias.name == TASK_CLASS)
        elif isinstance(stmt, ast.ImportFrom) and stmt.level == 0 and stmt.module == "mcp_rl":
            if any(alias.name == "task" for alias in stmt.names):
                names.add(TASK_CLASS)
        elif isinstance(stmt, ast.Import) and any(alias.name == TASK_MODULE for alias in stmt.names):
            names.add(TASK_CLASS)
    return names


def _derived(classes: list[ast.ClassDef], bases: set[str] | frozenset[str]) -> set[str]:
    """Names of the classes deriving from one of `bases`, directly or through another class here."""
    found: set[str] = set()
    changed = True
    while changed:  # fixed point
        changed = False
        for cls in classes:
            if cls.name not in found and any(b in bases or b in found for b in _base_names(cls)):
                found.add(cls.name)
                changed = True
    return found


def task_class_names(path: Path) -> set[str]:
    """The mcp_rl.task.Task subclasses defined in a file (empty when it cannot be parsed)."""
    try:
        tree = ast.parse(Path(path).read_bytes(), filename=str(path))
    except (OSError, SyntaxError, ValueError):
        return set()
    bases = _task_bases(tree)
    classes = [node for node in tree.body if isinstance(node, ast.ClassDef)]
    return _derived(classes, bases) if bases else set()


def parse_file(path: Path) -> list[EnvironmentInfo]:
    """Environment and task classes defined in one file (raises SyntaxError/OSError/ValueError)."""
    data = path.read_bytes()
    if not any(name in data for name in _BASE_BYTES):
        return []  # cheap pre-filter: most files of a repository are not environments
    tree = ast.parse(data.decode("utf-8"), filename=str(path))
    classes = [node for node in tree.body if isinstance(node, ast.ClassDef)]
    env_classes = _derived(classes, BASE_CLASSES)
    task_bases = _task_bases(tree)
    task_classes = _derived(classes, task_bases) - env_classes if task_bases else set()
    env_classes |= task_classes
    if not env_classes:
        return []
    module_doc = _docstring_line(tree)
    root = project_root(path)
    imports = top_level_imports(tree)
    found = []
    for cls in classes:
        if cls.name not in env_classes:
            continue
        name = _name_attribute(cls) or path.stem
        found.append(
            EnvironmentInfo(
                name=name,
                class_name=cls.name,
                file_path=path,
                description=_docstring_line(cls) or module_doc,
                source_dir=path.parent,
                project_root=root,
                select_name=name,
                imports=imports,
                env_vars=_env_vars_attribute(cls),
                kind="task" if cls.name in task_classes else "atropos",
            )
        )
    return found


def _skip_dir(entry: os.DirEntry[str]) -> bool:
    name = entry.name
    if name.startswith(".") or name in SKIP_DIRS or name.endswith(".egg-info"):
        return True
    return os.path.exists(os.path.join(entry.path, "pyvenv.cfg"))  # a virtualenv, whatever its name


def _is_candidate(name: str) -> bool:
    return (
        name.endswith(".py")
        and not name.startswith(("_", "test_"))
        and not name.endswith("_test.py")
        and name not in _SKIP_FILES
    )


def candidate_files(root: Path, max_depth: int = MAX_DEPTH, max_files: int = MAX_FILES) -> tuple[list[Path], list[str]]:
    """The .py files under `root` that may hold environments, shallow folders first, and the
    limits hit (a sentence each)."""
    files: list[Path] = []
    limits: list[str] = []
    queue: deque[tuple[str, int]] = deque([(str(root), 0)])
    too_deep: list[str] = []
    while queue:
        folder, depth = queue.popleft()
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError:
            continue
        for entry in entries:
            try:
                is_dir = entry.is_dir()
            except OSError:
                continue
            if is_dir:
                if _skip_dir(entry):
                    continue
                if depth + 1 > max_depth:
                    too_deep.append(entry.path)
                    continue
                queue.append((entry.path, depth + 1))
            elif _is_candidate(entry.name):
                if len(files) >= max_files:
                    limits.append(
                        f"Stopped after {max_files} .py files in {root}: the rest were not searched. "
                        "Point MCP_RL_ENV_PATHS at the folder that holds the environments."
                    )
                    return files, limits
                files.append(Path(entry.path))
    if too_deep:
        limits.append(
            f"Folders deeper than {max_depth} levels under {root} were not searched "
            f"({len(too_deep)}, e.g. {too_deep[0]}). Add a deeper folder to MCP_RL_ENV_PATHS to include them."
        )
    return files, limits


def scan(folders: list[Path], cache: ScanCache | None = None) -> Catalog:
    """Search folders recursively for environment classes."""
    cache = cache if cache is not None else ScanCache()
    environments: list[EnvironmentInfo] = []
    problems: list[ParseProblem] = []
    searched: list[Path] = []
    limits: list[str] = []
    roots: dict[Path, Path] = {}  # env file -> the searched folder it was found in
    for folder in folders:
        folder = folder.expanduser().resolve()
        searched.append(folder)
        if not folder.is_dir():
            problems.append(ParseProblem(file_path=folder, error="not a folder (check MCP_RL_ENV_PATHS)"))
            continue
        files, hit = candidate_files(folder)
        limits += hit
        for path in files:
            result = _parse_cached(path, cache)
            if isinstance(result, ParseProblem):
                problems.append(result)
                continue
            for env in result:
                roots.setdefault(env.file_path, folder)
                environments.append(env)
    environments, duplicates = _name_duplicates(environments, roots)
    return Catalog(
        environments=environments, problems=problems, duplicates=duplicates, searched=searched, limits_hit=limits
    )


def _name_duplicates(
    environments: list[EnvironmentInfo], roots: dict[Path, Path]
) -> tuple[list[EnvironmentInfo], list[DuplicateName]]:
    """Give environments sharing a name qualified names; the first found keeps the plain one."""
    groups: dict[str, list[int]] = {}
    for i, env in enumerate(environments):
        groups.setdefault(env.name, []).append(i)
    # The same file reached through two MCP_RL_ENV_PATHS entries is one environment.
    seen: set[tuple[Path, str]] = set()
    out = list(environments)
    keep = [True] * len(out)
    for i, env in enumerate(out):
        key = (env.file_path, env.class_name)
        keep[i] = key not in seen
        seen.add(key)
    duplicates = []
    for name, indices in groups.items():
        indices = [i for i in indices if keep[i]]
        if len(indices) < 2:
            continue
        members = [out[i] for i in indices]
        qualified = _qualified_names(members, roots)
        for i, q in zip(indices, qualified, strict=True):
            out[i] = out[i].model_copy(update={"qualified_name": q, "select_name": name if i == indices[0] else q})
        duplicates.append(
            DuplicateName(
                name=name,
                used=members[0].file_path,
                ignored=[m.file_path for m in members[1:]],
                used_as=qualified[0],
                others_as=qualified[1:],
            )
        )
    return [env for env, k in zip(out, keep, strict=True) if k], duplicates


def _qualified_names(members: list[EnvironmentInfo], roots: dict[Path, Path]) -> list[str]:
    """`folder/name` with as many trailing folders as it takes to tell them apart (relative to
    the searched folder, then absolute); two of one folder also get the file stem and class."""

    def parts(env: EnvironmentInfo) -> list[str]:
        root = roots.get(env.file_path)
        folder = env.file_path.parent
        rel = folder.relative_to(root.parent) if root is not None and folder.is_relative_to(root.parent) else folder
        return [p for p in rel.parts if p not in ("/", "\\")]

    all_parts = [parts(env) for env in members]
    longest = max(len(p) for p in all_parts)
    for k in range(1, longest + 1):
        names = ["/".join([*p[-k:], env.name]) for p, env in zip(all_parts, members, strict=True)]
        if len(set(names)) == len(names):
            return names
    return ["/".join([*p, env.file_path.stem, env.class_name]) for p, env in zip(all_parts, members, strict=True)]


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
