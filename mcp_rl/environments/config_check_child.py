"""Child program: validate a whole environment config with the environment's own config class.

Usage: python -m mcp_rl.environments.config_check_child FILE CLASS_NAME PROJECT_ROOT VALUES_JSON_FILE

A JSON schema checks one field at a time; a config class may also relate fields to each other
(`min_operand <= max_operand`) in its validators. This imports the environment (the parent never
does), validates the values with the class config_init() returns (BaseEnvConfig's fallback when
config_init fails, as introspection does) and prints {"has_validators": bool, "errors": [...]}.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from mcp_rl.environments.child import child_main
from mcp_rl.environments.loader import load_env_class


def has_validators(config_cls: type) -> bool:
    """Whether the class checks more than its JSON schema says (inherited validators included)."""
    decorators = getattr(config_cls, "__pydantic_decorators__", None)
    if decorators is None:
        return False
    return any(
        getattr(decorators, kind, None)
        for kind in ("model_validators", "field_validators", "validators", "root_validators")
    )


def config_class(env_cls: Any) -> type:
    # atroposlib is heavy (~3 s): imported by the check child when it runs, never by the server
    from atroposlib.envs.base import BaseEnvConfig

    try:
        config, _servers = env_cls.config_init()
        return type(config)
    except Exception:  # introspection falls back the same way and reports why
        return getattr(env_cls, "env_config_cls", None) or BaseEnvConfig


def errors_of(config_cls: type, values: dict[str, Any], edited: list[str]) -> list[str]:
    """What `config_cls` says is wrong with `values`, as far as the edited fields are concerned."""
    try:
        config_cls.model_validate(values)  # type: ignore[attr-defined]
    except ValidationError as exc:
        errors = []
        for err in exc.errors():
            loc = [str(part) for part in err["loc"]]
            # Whole-config checks (empty loc) and the edited fields are the edit's doing; a field
            # the agent never touched that does not round-trip is not a reason to refuse it.
            if not loc or loc[0] in edited:
                where = ".".join(loc) if loc else config_cls.__name__
                errors.append(f"{where}: {err['msg']}")
        return errors
    return []


def check(
    file_path: Path, class_name: str, project_root: Path, values: dict[str, Any], edited: list[str]
) -> dict[str, Any]:
    cls = config_class(load_env_class(file_path, class_name, project_root))
    return {"has_validators": has_validators(cls), "errors": errors_of(cls, values, edited)}


def answer_check(request: dict[str, Any]) -> dict[str, Any]:
    """A check request of the introspection worker (`request["check"]`: values, edited), as data."""
    try:
        check_request = request["check"]
        result = check(
            Path(request["file"]),
            request["class_name"],
            Path(request["project_root"]),
            check_request["values"],
            check_request["edited"],
        )
        return {"ok": True, "check": result}
    except Exception as exc:  # any failure of the environment's code is reported, not fatal
        return {"ok": False, "failure": {"kind": "error", "module": None, "message": f"{type(exc).__name__}: {exc}"}}


def main(argv: list[str]) -> int:
    file_path, class_name, project_root, values_file = Path(argv[0]), argv[1], Path(argv[2]), Path(argv[3])
    request = json.loads(values_file.read_text(encoding="utf-8"))
    return child_main(lambda: check(file_path, class_name, project_root, request["values"], request["edited"]))


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
