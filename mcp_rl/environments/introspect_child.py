"""Child program: import one environment and print its config fields as JSON on stdout.

Usage: python -m mcp_rl.environments.introspect_child FILE CLASS_NAME PROJECT_ROOT

The environment may print to stdout while importing, so our own stdout is kept aside and the
JSON document is the only thing written to it, at the end.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from mcp_rl.environments.child import child_main


def _type_name(annotation: Any) -> str:
    name = getattr(annotation, "__name__", None)
    text = str(annotation) if name is None or getattr(annotation, "__args__", None) else name
    return text.replace("typing.", "")


def _json_safe(value: Any) -> Any:
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        return str(value)


def describe(config_cls: type, initial: Any) -> list[dict[str, Any]]:
    schema = config_cls.model_json_schema(mode="validation")
    defs = schema.get("$defs", {})
    properties = schema.get("properties", {})
    initial_values = initial.model_dump(mode="json") if initial is not None else {}
    fields = []
    for name, info in config_cls.model_fields.items():
        field_schema = dict(properties.get(name, {}))
        if defs:
            field_schema["$defs"] = defs
        default = None if info.is_required() else info.get_default(call_default_factory=True)
        if hasattr(default, "model_dump"):
            default = default.model_dump(mode="json")
        fields.append(
            {
                "name": name,
                "type": _type_name(info.annotation),
                "default": _json_safe(default.value if hasattr(default, "value") else default),
                "description": info.description or "",
                "initial": _json_safe(initial_values.get(name, default)),
                "json_schema": field_schema,
            }
        )
    return fields


def introspect(file_path: Path, class_name: str, project_root: Path) -> dict[str, Any]:
    from atroposlib.envs.base import BaseEnvConfig

    from mcp_rl.environments.loader import load_env_class

    env_cls = load_env_class(file_path, class_name, project_root)
    fallback_cls = getattr(env_cls, "env_config_cls", None) or BaseEnvConfig
    try:
        config, servers = env_cls.config_init()
    except Exception as exc:  # any failure of the environment's own code is reported, not fatal
        reason = f"config_init() raised {type(exc).__name__}: {exc}"
        return {
            "config_class": fallback_cls.__name__,
            "fields": describe(fallback_cls, fallback_cls()),
            "source": "fallback",
            "fallback_reason": reason,
            "server_configs": [],
        }
    server_list = servers if isinstance(servers, list) else []
    return {
        "config_class": type(config).__name__,
        "fields": describe(type(config), config),
        "source": "config_init",
        "fallback_reason": None,
        "server_configs": [_json_safe(s.model_dump(mode="json", exclude={"api_key"})) for s in server_list],
    }


def main(argv: list[str]) -> int:
    file_path, class_name, project_root = Path(argv[0]), argv[1], Path(argv[2])
    return child_main(lambda: introspect(file_path, class_name, project_root))


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
