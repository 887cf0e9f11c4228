"""An environment's config fields, read by importing it in a child process.

The parent (the MCP server) never imports an environment: a child does (a fork of the warm
`introspect_worker`, or a one-shot `python -m mcp_rl.environments.introspect_child`), with a
deadline, and answers with one JSON document. Answers are cached on disk by what they depend on
(the file's content, its package's and config folder's files, the atroposlib and Python
versions), so a restarted server selects a known environment without any child and an edited
file is re-read.
"""

from __future__ import annotations

import hashlib
import os
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from mcp_rl.atomic import write_text_atomic
from mcp_rl.environments.child import run_json_child
from mcp_rl.environments.dependencies import missing_dependency
from mcp_rl.environments.discovery import SKIP_DIRS, EnvironmentInfo
from mcp_rl.environments.introspect_worker import (
    IntrospectionWorker,
    WorkerError,
    introspection_env,
)
from mcp_rl.environments.loader import package_location
from mcp_rl.errors import UserError
from mcp_rl.settings import Settings

# Bump when the child's output format changes, so stale cache entries are not trusted.
CACHE_FORMAT = 3
# Files of an environment's package (or folder) whose size and mtime enter the cache key.
_KEY_SUFFIXES = (".py", ".yaml", ".yml", ".json", ".toml", ".txt", ".jinja", ".j2")
_KEY_MAX_FILES = 2000


class FieldSpec(BaseModel):
    """One field of an environment's config class."""

    name: str
    type: str
    default: Any = None
    description: str = ""
    # The value config_init() chose (may differ from the class default).
    initial: Any = None
    # JSON schema of this field (with the class's $defs inlined under "$defs"), for validation.
    json_schema: dict[str, Any]


class ConfigSpec(BaseModel):
    """What introspection learned about an environment's config."""

    config_class: str
    fields: list[FieldSpec]
    # "config_init" when the environment's own config_init() answered, else "fallback".
    source: str
    fallback_reason: str | None = None
    # The server configs config_init() returned (dicts), for reference only.
    server_configs: list[dict[str, Any]] = []
    # Whether the config class has validators a JSON schema cannot express (model or field
    # validators); None when the introspection child did not say (edits then ask config_check).
    has_validators: bool | None = None
    # The folder config_init() ran in (the project root, or the environment's own folder when
    # it reads files relative to that); run processes use the same.
    working_dir: Path | None = None

    def field(self, name: str) -> FieldSpec | None:
        for spec in self.fields:
            if spec.name == name:
                return spec
        return None

    @property
    def initial_values(self) -> dict[str, Any]:
        return {spec.name: spec.initial for spec in self.fields}


def _atroposlib_version() -> str:
    try:
        return metadata.version("atroposlib")
    except metadata.PackageNotFoundError:
        return "none"


def _folder_stats(folder: Path, recursive: bool) -> list[str]:
    """(relative path, size, mtime) of the files an environment may import or read from `folder`."""
    out: list[str] = []
    if not folder.is_dir():
        return out
    walker = os.walk(folder) if recursive else [(str(folder), [], os.listdir(folder))]
    for dirpath, dirnames, filenames in walker:
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and not d.startswith("."))
        for name in sorted(filenames):
            if not name.endswith(_KEY_SUFFIXES):
                continue
            path = Path(dirpath) / name
            try:
                stat = path.stat()
            except OSError:
                continue
            out.append(f"{path.relative_to(folder)}:{stat.st_size}:{stat.st_mtime_ns}")
            if len(out) >= _KEY_MAX_FILES:
                return out
    return out


def _cache_key(env: EnvironmentInfo) -> str:
    digest = hashlib.sha256()
    digest.update(env.file_path.read_bytes())
    location = package_location(env.file_path)
    # Its package (imports of its own modules), else its folder (siblings imported by name),
    # and the project's configs/ folder (what config_init() typically reads).
    if location is not None:
        package_dir = location[0] / location[1].split(".")[0]
        digest.update("\n".join(_folder_stats(package_dir, recursive=True)).encode())
    else:
        digest.update("\n".join(_folder_stats(env.file_path.parent, recursive=False)).encode())
    for configs in {env.project_root / "configs", env.file_path.parent / "configs"}:
        digest.update("\n".join(_folder_stats(configs, recursive=True)).encode())
    digest.update(
        f"|{env.class_name}|{env.project_root}|{sys.version_info[:2]}|{_atroposlib_version()}|{CACHE_FORMAT}".encode()
    )
    return digest.hexdigest()


def _cache_path(settings: Settings, key: str) -> Path:
    return settings.cache_dir / "introspect" / f"{key}.json"


def read_config_spec(
    settings: Settings, env: EnvironmentInfo, worker: IntrospectionWorker | None = None, timeout_s: float | None = None
) -> ConfigSpec:
    """The config spec of `env`, from the cache when nothing it depends on changed.

    `worker`: the server's warm introspection worker (else a one-shot child). `timeout_s`: a
    tighter deadline than MCP_RL_INTROSPECT_TIMEOUT (e.g. what is left of a tool's budget)."""
    try:
        key = _cache_key(env)
    except OSError as exc:
        raise UserError(f"Cannot read {env.file_path}: {exc}. Call rl_list_environments to refresh.") from exc
    cached = _cache_path(settings, key)
    if cached.exists():
        try:
            return ConfigSpec.model_validate_json(cached.read_text(encoding="utf-8"))
        except ValueError:
            cached.unlink(missing_ok=True)  # a damaged entry is re-made below
    timeout = settings.introspect_timeout_s if timeout_s is None else min(timeout_s, settings.introspect_timeout_s)
    answer = _ask(settings, env, worker, timeout)
    spec = _spec_from_answer(env, answer, timeout)
    write_text_atomic(cached, spec.model_dump_json())
    return spec


def _doing(env: EnvironmentInfo) -> str:
    return f"Reading the config of {env.name!r} (importing {env.file_path})"


def _ask(
    settings: Settings, env: EnvironmentInfo, worker: IntrospectionWorker | None, timeout_s: float
) -> dict[str, Any]:
    if worker is not None:
        try:
            return worker.request(env.file_path, env.class_name, env.project_root, timeout_s)
        except WorkerError:
            pass  # a broken worker must not break select: the one-shot child below still works
    data = run_json_child(
        settings,
        "mcp_rl.environments.introspect_child",
        [str(env.file_path), env.class_name, str(env.project_root)],
        doing=_doing(env),
        timeout_hint="Check that the module imports quickly",
        cwd=env.project_root,
        env=introspection_env(settings, env.env_vars),
        timeout_s=timeout_s,
    )
    if not isinstance(data, dict):
        raise UserError(f"{_doing(env)} printed something unexpected: {data!r:.200}")
    return data


def _spec_from_answer(env: EnvironmentInfo, answer: dict[str, Any], timeout_s: float) -> ConfigSpec:
    if answer.get("timeout"):
        raise UserError(
            f"{_doing(env)} took longer than {timeout_s:.0f} s. Check that the module imports quickly "
            "(the deadline is MCP_RL_INTROSPECT_TIMEOUT)." + _tail(answer.get("log_tail"))
        )
    if not answer.get("ok"):
        raise load_failure(env, answer.get("failure") or {}, answer.get("log_tail"))
    try:
        return ConfigSpec.model_validate(answer["spec"])
    except (KeyError, ValueError) as exc:
        raise UserError(f"Environment {env.name!r} gave an unexpected config description: {exc}") from exc


def _tail(lines: list[str] | None) -> str:
    return ("\nLast lines of its output:\n" + "\n".join(lines)) if lines else ""


def load_failure(env: EnvironmentInfo, failure: dict[str, Any], log_tail: list[str] | None = None) -> UserError:
    """One line saying why the environment did not load and what fixes it, then details."""
    module = failure.get("module")
    if failure.get("kind") == "missing_module" and module:
        top = str(module).split(".")[0]
        if (env.file_path.parent / f"{top}.py").exists() or (env.project_root / top).exists():
            return UserError(
                f"Environment {env.name!r} failed to import its own module {module!r} ({failure.get('message')}); "
                f"check the imports of {env.file_path}."
            )
        return UserError(missing_dependency(str(module), env.file_path, env.project_root).sentence(env.name))
    if failure.get("kind") == "missing_name" and module:
        top = str(module).split(".")[0]
        if top == "atroposlib":
            installed = f"mcp-rl runs with atroposlib {_atroposlib_version()}, its final release"
        else:
            try:
                installed = f"{top} {metadata.version(top)} is installed"
            except (metadata.PackageNotFoundError, ValueError):
                installed = f"the installed {top} lacks it"
        return UserError(
            f"Environment {env.name!r} needs a different version of {top}: {failure.get('message')} "
            f"({installed}). Use an environment written for that version, or adapt {env.file_path}."
        )
    traceback_lines = [line.rstrip() for chunk in failure.get("traceback") or [] for line in chunk.splitlines()]
    return UserError(
        f"Environment {env.name!r} failed to load: {failure.get('message', 'unknown error')}. "
        f"Fix {env.file_path} (or what it imports) and select it again." + _tail(traceback_lines[-10:] or log_tail)
    )
