"""The checks a value passes before it is stored or run: an environment field against its JSON
schema (strings read as the numbers and booleans agents meant), stored edits that still fit,
group_size against batch_size, and a local base model's folder.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from mcp_rl.config.options import RunOptions, effective_backend
from mcp_rl.environments.introspect import ConfigSpec, FieldSpec
from mcp_rl.errors import UserError, clip, clip_message
from mcp_rl.settings import Settings


def clean_edits(spec: ConfigSpec, stored: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """Stored environment edits that still fit the environment's fields; the others are dropped
    (back to the environment's own value) with a note."""
    edits: dict[str, Any] = {}
    notes: list[str] = []
    for name, value in stored.items():
        field_spec = spec.field(name)
        if field_spec is None:
            notes.append(f"Edit of unknown field {clip(name)} in session.json was ignored (value {clip(value)}).")
            continue
        if json_size(value) > MAX_VALUE_BYTES:
            notes.append(
                f"Edit {name} in session.json is over {MAX_VALUE_BYTES:,} bytes and was ignored; "
                f"{name} is back to {clip(field_spec.initial)}."
            )
            continue
        try:
            edits[name] = validate_field(field_spec, value)
        except UserError:
            notes.append(
                f"Edit {name}={clip(value)} in session.json is not valid for the environment; "
                f"{name} is back to {field_spec.initial!r}."
            )
    return edits, notes


# Size caps of the config an agent edits (rl_edit_config): one value, as JSON, and the whole
# session (edits and run options). A config is a few KiB; these leave room for a long prompt or a
# list of a few thousand items, and refuse what would be echoed back on every config read.
MAX_VALUE_BYTES = 64 * 1024
MAX_CONFIG_BYTES = 256 * 1024


def coerce(value: Any) -> Any:
    """Agents often send numbers, booleans, lists and mappings as text: read text as JSON (never
    YAML: "1:30" is not 90, "0x0A" not 10, "off" not false, "~" not null, "a #b" stays whole).
    Text that is not JSON, or is JSON null or a JSON string, stays the text it was."""
    if isinstance(value, str) and len(value) <= MAX_VALUE_BYTES:
        try:
            parsed = json.loads(value)
        except (ValueError, RecursionError):  # ValueError: not JSON, or an integer of more than 4300 digits
            return value
        return value if parsed is None or isinstance(parsed, str) else parsed
    return value


def json_size(value: Any) -> int:
    """Bytes of `value` as JSON (a value that cannot be written as JSON counts as too big)."""
    try:
        return len(json.dumps(value, default=str).encode("utf-8"))
    except (ValueError, RecursionError):
        return MAX_CONFIG_BYTES + 1


def check_value_size(field: str, value: Any) -> None:
    """Refuse a value over MAX_VALUE_BYTES (as JSON), saying its size and the cap."""
    if isinstance(value, str) and len(value) > MAX_VALUE_BYTES:
        size = len(value)
    else:
        size = json_size(value)
    if size > MAX_VALUE_BYTES:
        raise UserError(
            f"The value for {clip(field)} is {size:,} bytes as JSON; a config value is at most {MAX_VALUE_BYTES:,} "
            "bytes (64 KiB). Give a shorter value (a long list belongs in the task's own files). Nothing was changed."
        )


def validate_field(spec: FieldSpec, value: Any) -> Any:
    import jsonschema  # only needed when editing; keeps server start-up light

    validator = jsonschema.Draft202012Validator(spec.json_schema)
    candidates = [value]
    coerced = coerce(value)
    if coerced is not value and coerced != value:
        candidates.append(coerced)
    if isinstance(value, dict | list) and "string" in _schema_types(spec.json_schema):
        candidates.append(json.dumps(value))  # a field that holds JSON text, given the object itself
    # The value as the agent meant it (the coerced one, when it differs) says best what is wrong.
    last_error = ""
    for candidate in candidates:
        if not _finite(candidate):
            last_error = "not a finite number (NaN and infinity are refused)"
            continue
        errors = sorted(validator.iter_errors(candidate), key=lambda e: e.path)
        if not errors:
            return _as_int_if_meant(spec.json_schema, candidate)
        last_error = clip_message(errors[0].message, 300)
    if isinstance(value, str) and not _finite(_float_or_none(value)):
        last_error = "not a finite number (NaN and infinity are refused)"  # 'inf', 'NaN', 'Infinity'
    expected = spec.type or spec.json_schema.get("type", "?")
    raise UserError(
        f"Invalid value {clip(value)} for {spec.name} (type {expected}): {last_error}. Nothing was changed."
    )


def _as_int_if_meant(schema: dict[str, Any], value: Any) -> Any:
    """A whole float (3.0, 1e63) for a field that takes integers and no other numbers, as the integer.

    JSON schema counts 3.0 as an integer, but the config class may not parse it (pydantic refuses
    floats beyond 64 bits), and run.yaml should hold what the field's type says."""
    if isinstance(value, float) and value.is_integer():
        types = _schema_types(schema)
        if "integer" in types and "number" not in types:
            return int(value)
    return value


def _schema_types(schema: Any) -> set[str]:
    """Every `type` named in a field's schema, through anyOf/oneOf/allOf."""
    if not isinstance(schema, dict):
        return set()
    kind = schema.get("type")
    types = set(kind) if isinstance(kind, list) else {kind} if isinstance(kind, str) else set()
    for key in ("anyOf", "oneOf", "allOf"):
        for sub in schema.get(key) or []:
            types |= _schema_types(sub)
    return types


def _float_or_none(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _finite(value: Any) -> bool:
    """False if `value` is or holds a NaN or an infinity (JSON schema lets them through as numbers)."""
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(_finite(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return all(_finite(v) for v in value)
    return True


def check_group_vs_batch(group_size: Any, batch_size: Any, *, previous_group: Any = None) -> None:
    """Refuse a group_size that does not divide batch_size, naming the edits that get there.

    `previous_group` is given when group_size is the field being edited: moving from group 16 to 24
    with batch 16 fails in either order, so the message names the batch that works for both.
    """
    if not isinstance(group_size, int) or not isinstance(batch_size, int):
        return
    if group_size < 2:
        raise UserError(f"group_size must be at least 2 (got {group_size}): GRPO compares answers within a group.")
    if batch_size % group_size == 0:
        return
    if isinstance(previous_group, int) and previous_group >= 1:
        bridge = math.lcm(previous_group, group_size)
        how = (
            f"First set batch_size to {bridge} (a multiple of both {previous_group} and {group_size}), "
            f"then group_size to {group_size}; then batch_size to any multiple of {group_size}."
        )
    else:
        below = batch_size // group_size * group_size
        options = [n for n in (below, below + group_size) if n >= group_size]
        how = f"Use a multiple of {group_size}, such as {' or '.join(map(str, options))}, or change group_size first."
    raise UserError(
        f"batch_size ({batch_size}) must be a multiple of group_size ({group_size}). {how} Nothing was changed."
    )


def check_base_model(settings: Settings, options: RunOptions) -> None:
    backend = effective_backend(settings, options.backend)
    if backend == "local" and options.base_model != "default":
        folder = Path(options.base_model).expanduser()
        if not (folder / "config.json").is_file():
            raise UserError(
                f"base_model {options.base_model!r} is not a local Hugging Face model folder (no config.json). "
                'Use "default" for the embedded SmolLM2-135M-Instruct or give the path of a model folder. '
                "Nothing is downloaded from a hub."
            )
