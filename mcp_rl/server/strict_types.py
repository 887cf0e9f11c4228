"""Strict argument types: what a tool's input schema says is a boolean, a number or an integer is
taken only as that JSON type. Pydantic's lax mode would turn `overwrite: "yes"` into true,
`max_cost_usd: true` into a $1 cap and `step: "3"` into 3; an agent that sent those meant
something, and guessing it wrongly spends money or replaces files. A number too large to mean
anything (1e308 hours) is refused by name instead of failing deep inside the tool.
"""

from __future__ import annotations

import math
import reprlib
from typing import Any

# Larger than any count, step, price or duration a tool takes; past it floats lose whole units.
MAX_MAGNITUDE = 2**53

_repr = reprlib.Repr()
_repr.maxstring = 40
_repr.maxother = 40

_NAMES = {"boolean": "true or false", "integer": "a whole number", "number": "a number", "string": "a string"}


def _types(schema: dict[str, Any]) -> set[str]:
    """The JSON types a property's schema allows (empty: not stated, nothing checked here)."""
    found: set[str] = set()
    kind = schema.get("type")
    if isinstance(kind, str):
        found.add(kind)
    elif isinstance(kind, list):
        found.update(k for k in kind if isinstance(k, str))
    for key in ("anyOf", "oneOf"):
        for branch in schema.get(key) or ():
            if isinstance(branch, dict):
                branch_types = _types(branch)
                if not branch_types:
                    return set()  # a branch of any type ($ref, an object): leave it to the model
                found.update(branch_types)
    if "enum" in schema and not found:
        found.update({"string"} if all(isinstance(v, str) for v in schema["enum"]) else set())
    return found


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def type_problem(name: str, value: Any, schema: dict[str, Any]) -> str | None:
    """Why `value` is not of the type `schema` states for argument `name` (None: it is, or the
    schema leaves it to the argument model)."""
    allowed = _types(schema)
    if (
        value is None
        or not allowed
        or not allowed <= {"boolean", "integer", "number", "string", "null", "array", "object"}
    ):
        return None
    got = _json_type(value)
    expected = " or ".join(_NAMES[t] for t in ("boolean", "integer", "number", "string") if t in allowed) or "null"
    if got == "number":
        if not ({"integer", "number"} & allowed):
            return f"{name} must be {expected}, got the number {_repr.repr(value)}"
        if isinstance(value, float) and not math.isfinite(value):
            return f"{name} must be a finite number, got {value}"
        if abs(value) > MAX_MAGNITUDE:
            return f"{name} is too large ({value:.3g}): it must be at most {MAX_MAGNITUDE:.3g}"
        if "number" not in allowed and isinstance(value, float) and not value.is_integer():
            return f"{name} must be a whole number, got {value}"
        return None
    if got in ("boolean", "string") and got not in allowed:
        article = "the string" if got == "string" else "the boolean"
        hint = ""
        if got == "string" and {"integer", "number", "boolean"} & allowed:
            hint = " (send it as a JSON " + ("boolean" if "boolean" in allowed else "number") + ", without quotes)"
        return f"{name} must be {expected}, got {article} {_repr.repr(value)}{hint}"
    return None


def type_problems(arguments: dict[str, Any], properties: dict[str, Any]) -> list[str]:
    """Every argument whose JSON type its schema does not allow, in words."""
    problems = []
    for name, value in arguments.items():
        schema = properties.get(name)
        if isinstance(schema, dict):
            problem = type_problem(name, value, schema)
            if problem is not None:
                problems.append(problem)
    return problems
