"""Only JSON Schema's own `format` values in the schemas clients see.

pydantic writes `format: "path"` for a `Path` field (and `file-path`, `directory-path`,
`password`, ...), which no JSON Schema validator knows: Claude Code, opencode and Gemini CLI's
TypeScript SDK print `unknown format "path" ignored in schema at path ...` for each one. In the
published tools (`RlServer.list_tools`), each non-standard `format` in an input and output schema
becomes a plain string whose description says what it holds. Only the published schemas change:
the argument and answer models validate as before.
"""

from __future__ import annotations

from typing import Any

# JSON Schema 2020-12, "Defined Formats" (7.3), and draft-07's (a subset).
STANDARD_FORMATS = frozenset(
    {
        "date-time", "date", "time", "duration", "email", "idn-email", "hostname", "idn-hostname",
        "ipv4", "ipv6", "uri", "uri-reference", "iri", "iri-reference", "uuid", "uri-template",
        "json-pointer", "relative-json-pointer", "regex",
    }
)  # fmt: skip
_SAYS = {"path": "a file system path", "file-path": "a path to a file", "directory-path": "a path to a folder"}


def standard_formats(schema: Any) -> Any:
    """`schema` with every non-standard `format` replaced by words in `description`: a new object
    where something changed, the same one where nothing did (most of it, at every start)."""
    if isinstance(schema, list):
        items = [standard_formats(item) for item in schema]
        return schema if all(a is b for a, b in zip(items, schema, strict=True)) else items
    if not isinstance(schema, dict):
        return schema
    changed = False
    out = {}
    for key, value in schema.items():
        out[key] = new = standard_formats(value)
        changed = changed or new is not value
    fmt = out.get("format")
    if isinstance(fmt, str) and fmt not in STANDARD_FORMATS and isinstance(out.get("type", "string"), str):
        del out["format"]
        says = _SAYS.get(fmt, f"{fmt.replace('-', ' ')} text")
        described = out.get("description")
        out["description"] = f"{described} ({says})" if described else f"{says[0].upper()}{says[1:]}."
        changed = True
    return out if changed else schema
