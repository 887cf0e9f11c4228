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

from mcp_rl.atomic import write_text_atomic
from mcp_rl.environments.child import run_json_child
from mcp_rl.environments.discovery import declared_env_vars
from mcp_rl.environments.introspect_worker import IntrospectionWorker, WorkerError, introspection_env
from mcp_rl.errors import UserError
from mcp_rl.runconfig import EnvironmentRef
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


def check_whole_config(
    settings: Settings,
    env: EnvironmentRef,
    values: dict[str, Any],
    edited: list[str],
    worker: IntrospectionWorker | None = None,
) -> list[str]:
    """Errors of the environment's config class for `values` (empty: valid, or nothing to check).

    With the server's warm introspection `worker`, a fork of it checks (the environment's own
    import only, ~0.1 s for the bundled ones); else, or if the worker fails, a one-shot child
    (atroposlib's import too, ~3 s)."""
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
    answer = _ask_worker(settings, worker, env, values, edited) if worker is not None else None
    if answer is None:
        answer = _ask_child(settings, env, values, edited)
    _KNOWN[key] = bool(answer.get("has_validators"))
    write_text_atomic(known, json.dumps({"has_validators": _KNOWN[key]}))
    return [str(e) for e in answer.get("errors", [])]


def _ask_worker(
    settings: Settings, worker: IntrospectionWorker, env: EnvironmentRef, values: dict[str, Any], edited: list[str]
) -> dict[str, Any] | None:
    """The worker's answer, or None when it could not give one (the caller asks a child)."""
    try:
        reply = worker.request(
            env.file_path,
            env.class_name,
            env.project_root,
            settings.introspect_timeout_s,
            check={"values": values, "edited": edited},
        )
    except WorkerError:
        return None
    if reply.get("ok") and isinstance(reply.get("check"), dict):
        return reply["check"]
    if reply.get("timeout"):
        raise UserError(
            f"Checking the config of {env.name!r} with its own config class took longer than "
            f"{settings.introspect_timeout_s:.0f} s (MCP_RL_INTROSPECT_TIMEOUT). Nothing was changed."
        )
    failure = reply.get("failure") or {}
    raise UserError(
        f"Checking the config of {env.name!r} with its own config class failed: {failure.get('message', 'no answer')}. "
        "Nothing was changed."
    )


def _ask_child(settings: Settings, env: EnvironmentRef, values: dict[str, Any], edited: list[str]) -> dict[str, Any]:
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
            # no key of ours: validating a config calls no service
            env=introspection_env(settings, declared_env_vars(env.file_path, env.class_name)),
        )
    return answer if isinstance(answer, dict) else {}
