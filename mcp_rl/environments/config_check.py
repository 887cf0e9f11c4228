"""Checking a whole environment config with the environment's own class, before it is saved.

Field edits are checked against each field's JSON schema in the server; what a schema cannot say
(a model validator relating fields, a field validator) is only known to the config class, so the
merged config is validated by it in a child process (`config_check_child`). Whether a class has
such validators is remembered per environment file content, so environments without any pay
for the child once, not on every edit.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
from pathlib import Path
from typing import Any

from mcp_rl.environments.child import run_json_child
from mcp_rl.environments.introspect_worker import introspection_env
from mcp_rl.runconfig import EnvironmentRef, write_text_atomic
from mcp_rl.settings import Settings


# has_validators by _key, for this process (tests and a long-lived server ask once per file).
_KNOWN: dict[str, bool] = {}


def _key(env: EnvironmentRef) -> str:
    digest = hashlib.sha256()
    digest.update(Path(env.file_path).read_bytes())
    digest.update(f"|{env.class_name}|{env.project_root}".encode())
    return digest.hexdigest()


def _known_path(settings: Settings, key: str) -> Path:
    return settings.cache_dir / "config_check" / f"{key}.json"


def check_whole_config(settings: Settings, env: EnvironmentRef, values: dict[str, Any], edited: list[str]) -> list[str]:
    """Errors of the environment's config class for `values` (empty: valid, or nothing to check)."""
    try:
        key = _key(env)
    except OSError:
        return []  # the file is gone: selecting/starting reports that with its own message
    known = _known_path(settings, key)
    if key not in _KNOWN:
        try:
            _KNOWN[key] = json.loads(known.read_text(encoding="utf-8"))["has_validators"] is True
        except (OSError, ValueError, KeyError, TypeError):
            pass  # not known yet (or a damaged cache entry): ask the child
    if _KNOWN.get(key) is False:
        return []
    settings.cache_dir.mkdir(parents=True, exist_ok=True)
    # Values go through a file: one may be large, and argv has a size limit.
    with tempfile.NamedTemporaryFile("w", dir=settings.cache_dir, suffix=".json", encoding="utf-8") as fh:
        json.dump({"values": values, "edited": edited}, fh, default=str)
        fh.flush()
        answer = run_json_child(
            settings,
            "mcp_rl.environments.config_check_child",
            [str(env.file_path), env.class_name, str(env.project_root), fh.name],
            doing=f"Checking the config of {env.name!r} with its own config class",
            timeout_hint="Check that the module imports quickly",
            cwd=env.project_root,
            env=introspection_env(settings),  # no secrets: validating a config calls no service
        )
    _KNOWN[key] = bool(answer.get("has_validators"))
    write_text_atomic(known, json.dumps({"has_validators": _KNOWN[key]}))
    return [str(e) for e in answer.get("errors", [])]
