"""From a model's answer to an OpenEnv action, and from an OpenEnv observation to text.

An OpenEnv environment publishes its action's JSON schema at `/schema`. A model answers in
text; the action is, in this order: the answer as a JSON object, a fenced ```json block in it,
or, when the schema has exactly one required field, the answer itself as that field (a
`\\boxed{...}` around it removed; an integer or number field parsed as one). Anything else is an
`ActionError`: the answer is not an action, which the environment never sees.

Nothing here imports openenv: it runs in mcp-rl's interpreter, the server in the family's.
"""

from __future__ import annotations

import json
import re
from typing import Any

_FENCE = re.compile(r"```(?:json)?\s*(\{.*?\})\s*```", re.DOTALL)
_BOXED = re.compile(r"\\boxed\{([^{}]*)\}?")
# Observation fields that are the episode's bookkeeping, not what the model is shown.
_BOOKKEEPING = frozenset({"done", "reward", "metadata"})


class ActionError(ValueError):
    """The model's answer is not an action of this environment."""


def required_fields(schema: dict[str, Any]) -> list[str]:
    required = schema.get("required")
    return [str(f) for f in required] if isinstance(required, list) else []


def _coerce(value: str, field_schema: dict[str, Any]) -> Any:
    kind = field_schema.get("type")
    text = value.strip()
    if kind == "integer":
        match = re.search(r"-?\d+", text)
        if match is None:
            raise ActionError(f"expected an integer, got {text[:60]!r}")
        return int(match.group())
    if kind == "number":
        match = re.search(r"-?\d+(?:\.\d+)?", text)
        if match is None:
            raise ActionError(f"expected a number, got {text[:60]!r}")
        return float(match.group())
    if kind == "boolean":
        if text.lower() in ("true", "yes", "1"):
            return True
        if text.lower() in ("false", "no", "0"):
            return False
        raise ActionError(f"expected true or false, got {text[:60]!r}")
    return text


def parse_action(answer: str, schema: dict[str, Any]) -> dict[str, Any]:
    """The action for `answer` under the action `schema` (a JSON schema of an object)."""
    properties = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
    assert isinstance(properties, dict)
    candidates = [answer.strip()]
    candidates += [m.group(1) for m in _FENCE.finditer(answer)]
    for candidate in candidates:
        if not candidate.startswith("{"):
            continue
        try:
            value = json.loads(candidate)
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    required = required_fields(schema)
    if len(required) == 1:
        field = required[0]
        boxed = _BOXED.search(answer)
        text = boxed.group(1) if boxed else answer
        field_schema = properties.get(field, {})
        return {field: _coerce(text, field_schema if isinstance(field_schema, dict) else {})}
    raise ActionError(
        f"the answer is neither a JSON action nor a single field (required: {', '.join(required) or 'none'})"
    )


def observation_text(payload: dict[str, Any]) -> str:
    """What the model is shown of an observation (`serialize_observation`'s `observation`): its
    one text field when it has one, else its fields as JSON (bookkeeping fields left out)."""
    shown = {k: v for k, v in payload.items() if k not in _BOOKKEEPING}
    texts = [v for v in shown.values() if isinstance(v, str)]
    if len(shown) == 1 or (len(texts) == 1 and all(isinstance(v, str) or v in (None, "") for v in shown.values())):
        only = texts[0] if texts else next(iter(shown.values()), "")
        return str(only)
    return json.dumps(shown, sort_keys=True, default=str)


def action_hint(schema: dict[str, Any]) -> str:
    """One line telling the model the form of a move (shown under the first observation)."""
    properties = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
    assert isinstance(properties, dict)
    required = required_fields(schema)
    if len(required) == 1:
        field = properties.get(required[0], {})
        field = field if isinstance(field, dict) else {}
        kind = {"integer": "a whole number", "number": "a number", "boolean": "true or false"}.get(
            str(field.get("type")), "text"
        )
        about = f" ({field['description']})" if field.get("description") else ""
        return f"Answer with your {required[0]}: {kind}{about}."
    fields = ", ".join(f'"{name}"' for name in properties if name != "metadata")
    return f"Answer with a JSON object with the fields {fields}."
