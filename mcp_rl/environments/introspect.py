"""An environment's config fields, read by importing it in a child process.

The parent (the MCP server) never imports an environment: it runs
`python -m mcp_rl.environments.introspect_child` with a deadline, reads one JSON document, and
caches it by the file's content hash, so a second select is instant and an edited file is re-read.
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from mcp_rl.environments.child import run_json_child
from mcp_rl.environments.discovery import EnvironmentInfo
from mcp_rl.errors import UserError
from mcp_rl.runconfig import write_text_atomic
from mcp_rl.settings import Settings

# Bump when the child's output format changes, so stale cache entries are not trusted.
CACHE_FORMAT = 2


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

    def field(self, name: str) -> FieldSpec | None:
        for spec in self.fields:
            if spec.name == name:
                return spec
        return None

    @property
    def initial_values(self) -> dict[str, Any]:
        return {spec.name: spec.initial for spec in self.fields}


def _cache_key(env: EnvironmentInfo) -> str:
    digest = hashlib.sha256()
    digest.update(env.file_path.read_bytes())
    digest.update(f"|{env.class_name}|{env.project_root}|{sys.version_info[:2]}|{CACHE_FORMAT}".encode())
    return digest.hexdigest()


def _cache_path(settings: Settings, key: str) -> Path:
    return settings.cache_dir / "introspect" / f"{key}.json"


def read_config_spec(settings: Settings, env: EnvironmentInfo) -> ConfigSpec:
    """The config spec of `env`, from the cache when the file is unchanged."""
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
    spec = _run_child(settings, env)
    write_text_atomic(cached, spec.model_dump_json())
    return spec


def _run_child(settings: Settings, env: EnvironmentInfo) -> ConfigSpec:
    data = run_json_child(
        settings,
        "mcp_rl.environments.introspect_child",
        [str(env.file_path), env.class_name, str(env.project_root)],
        doing=f"Reading the config of {env.name!r} (importing {env.file_path})",
        timeout_hint="Check that the module imports quickly",
        cwd=env.project_root,
    )
    try:
        return ConfigSpec.model_validate(data)
    except ValueError as exc:
        raise UserError(f"Environment {env.name!r} gave an unexpected config description: {exc}") from exc
