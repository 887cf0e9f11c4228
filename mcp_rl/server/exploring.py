"""What an agent meets while it finds its way is an answer, not a tool error.

Hosts count `isError` results: Hermes Agent marks a server unreachable after three in a row,
whatever they were. "No environment selected" and an unknown run, test, evaluation or export id
are an exploring agent's first steps, not anything broken, so they come back as normal results
saying what exists (`found: false`, the ids there are, what to call next). Everything else that
fails stays a tool error.

Every tool's published output schema takes this answer as an alternative (`anyOf`), so clients
that check structured content against the schema (the Python and TypeScript SDKs do) accept it.
The tools raise `Exploring`; `RlServer.call_tool` (server/rl_server.py) turns it into the answer.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mcp_types import CallToolResult, TextContent
from pydantic import BaseModel, Field

from mcp_rl.errors import Exploring, clip_message
from mcp_rl.settings import Settings

KNOWN_LIMIT = 20
DEF_NAME = "ExploringAnswer"


class ExploringAnswer(BaseModel):
    """Not found or not chosen yet: what exists and what to call next (a normal result)."""

    found: bool = Field(False, description="Always false: what was asked for does not exist (yet).")
    kind: str = Field(description="What was missing: environment, run_id, test_id, eval_id or export_id.")
    asked: str | None = Field(None, description="The id asked for (cut to 64 characters), if any.")
    known: list[str] = Field(
        default_factory=list, description=f"The ids that exist, newest first (at most {KNOWN_LIMIT})."
    )
    message: str = Field(description="What happened and what to call next.")


def _ids_in(folder: Path, marker: str | None = None) -> list[str]:
    try:
        entries = [p for p in folder.iterdir() if p.is_dir() and not p.name.startswith(".")]
    except OSError:
        return []
    if marker is not None:
        entries = [p for p in entries if (p / marker).exists()]
    entries.sort(key=lambda p: p.stat().st_mtime, reverse=True)
    return [p.name for p in entries[:KNOWN_LIMIT]]


_LISTERS: dict[str, Callable[[Settings], list[str]]] = {
    "run_id": lambda s: _ids_in(s.runs_dir, "run.yaml"),
    "test_id": lambda s: _ids_in(s.tests_dir),
    "eval_id": lambda s: _ids_in(s.evaluations_dir),
    "export_id": lambda s: _ids_in(s.exports_dir),
}


def exploring_cause(exc: BaseException) -> Exploring | None:
    """The Exploring error behind a tool's failure (the SDK wraps what a tool raises), if any."""
    seen: BaseException | None = exc
    for _ in range(4):
        if isinstance(seen, Exploring):
            return seen
        seen = seen.__cause__ if seen is not None else None
    return None


def exploring_result(exc: Exploring, settings: Settings) -> CallToolResult:
    """The normal result answering `exc`: what was missing, the ids that exist, what to call next."""
    # Bounded like every tool error (the services clip the ids they echo; this is the safety net).
    answer = ExploringAnswer(kind=exc.kind, asked=exc.value, message=clip_message(str(exc), 2000))
    lister = _LISTERS.get(answer.kind)
    if lister is not None:
        answer.known = lister(settings)
        shown = ", ".join(answer.known) if answer.known else "none yet"
        answer.message = f"{answer.message} Known {answer.kind}s: {shown}."
    return CallToolResult(
        content=[TextContent(type="text", text=answer.message)],
        structured_content=answer.model_dump(mode="json"),
    )


def output_schema_with_answer(schema: dict[str, Any]) -> dict[str, Any]:
    """`schema` that also accepts an ExploringAnswer: its `required` moves into an `anyOf` branch."""
    if schema.get("type") != "object" or "anyOf" in schema:
        return schema
    out = {k: v for k, v in schema.items() if k != "required"}
    out["$defs"] = {**schema.get("$defs", {}), DEF_NAME: _answer_schema()}
    out["anyOf"] = [{"required": schema.get("required", [])}, {"$ref": f"#/$defs/{DEF_NAME}"}]
    return out


@functools.cache
def _answer_schema() -> dict[str, Any]:
    """Derived once per process (pydantic builds it in ms; there are ~20 tools at every start)."""
    answer = ExploringAnswer.model_json_schema(mode="serialization")
    answer.pop("title", None)
    return answer
