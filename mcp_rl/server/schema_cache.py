"""Tool output schemas kept from an earlier start, so a start does not derive them again.

Registering a tool derives its output schema: pydantic builds a validator and a JSON schema for
the tool's answer model. For the ~20 tools here that was ~60 ms of every start (half of building
the server) for schemas that change only when the code does. The first start writes them to
`<cache_dir>/tool-schemas.json` under a key made of the Python, pydantic and SDK versions and the
size and modification time of every mcp_rl module loaded; a later start with the same key
registers each tool without deriving and sets the kept schema and the answer model on the tool's
metadata (the SDK reads those fields live). The answer's validator is then built at the tool's
first call instead of at start-up. Anything the file cannot stand for (a tool not in it, an
answer that is not a pydantic model, another key) is registered the SDK's own way, and the
file is written again. What a client sees is the same either way (a test compares them).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pydantic
import pydantic_core
from mcp.server import MCPServer
from mcp.server.mcpserver.utilities import func_metadata
from pydantic import BaseModel

from mcp_rl.atomic import write_text_atomic
from mcp_rl.settings import Settings

log = logging.getLogger(__name__)

FILE_NAME = "tool-schemas.json"
FORMAT = 1


def cache_file(settings: Settings) -> Path:
    return settings.cache_dir / FILE_NAME


def code_key() -> str:
    """Changes whenever something the schemas are derived from may have: the versions of Python,
    pydantic and the SDK's derivation, and every mcp_rl module loaded (their models)."""
    parts = [str(FORMAT), sys.version, pydantic.VERSION, pydantic_core.__version__, _stamp(func_metadata.__file__)]
    for name, module in sorted(sys.modules.items()):
        if name == "mcp_rl" or name.startswith("mcp_rl."):
            parts.append(f"{name} {_stamp(getattr(module, '__file__', None))}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def _stamp(path: str | None) -> str:
    if not path:
        return "-"
    try:
        st = os.stat(path)
    except OSError:
        return "?"
    return f"{st.st_size}:{st.st_mtime_ns}"


def _read(path: Path, key: str) -> dict[str, dict[str, Any]]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}  # none yet, or damaged: derived and written again
    if not isinstance(data, dict) or data.get("key") != key or not isinstance(data.get("tools"), dict):
        return {}
    return {name: entry for name, entry in data["tools"].items() if _valid_entry(entry)}


def _valid_entry(entry: Any) -> bool:
    return isinstance(entry, dict) and isinstance(entry.get("model"), str) and isinstance(entry.get("schema"), dict)


def _model_name(model: Any) -> str | None:
    """`module:qualname` of a pydantic model that can be found again by that name, else None."""
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        return None
    name = f"{model.__module__}:{model.__qualname__}"
    return name if _find_model(name) is model else None


def _find_model(name: str) -> type[BaseModel] | None:
    module_name, _, qualname = name.partition(":")
    found: Any = sys.modules.get(module_name)
    for part in qualname.split("."):
        found = getattr(found, part, None)
    return found if isinstance(found, type) and issubclass(found, BaseModel) else None


@contextmanager
def kept_output_schemas(mcp: MCPServer, settings: Settings) -> Iterator[None]:
    """Around the registration of tools: tools in the cache get their kept output schema; if any
    tool had to be derived, the cache is written again afterwards."""
    path = cache_file(settings)
    key = code_key()
    kept = _read(path, key)
    register: Callable[..., None] = mcp.add_tool
    attach: dict[str, tuple[type[BaseModel], dict[str, Any]]] = {}
    derived = False

    def add_tool(fn: Callable[..., Any], **kwargs: Any) -> None:
        nonlocal derived
        name = kwargs.get("name") or fn.__name__
        entry = kept.get(name)
        model = _find_model(entry["model"]) if entry and kwargs.get("structured_output") is not False else None
        if entry is None or model is None:
            derived = True
            register(fn, **kwargs)
            return
        register(fn, **{**kwargs, "structured_output": False})  # the argument model only
        attach[name] = (model, entry["schema"])

    # MCPServer.tool() registers through self.add_tool: an attribute on this instance comes first.
    setattr(mcp, "add_tool", add_tool)  # noqa: B010 (an instance attribute over the method, on purpose)
    try:
        yield
    finally:
        delattr(mcp, "add_tool")
    tools = {tool.name: tool for tool in mcp._tool_manager.list_tools()}
    for name, (model, schema) in attach.items():
        meta = tools[name].fn_metadata
        # What the SDK derives for a pydantic answer model: the model, its schema, not wrapped.
        meta.output_schema = schema
        meta.output_model = model
    if derived:
        _write(path, key, tools.values())


def _write(path: Path, key: str, tools: Any) -> None:
    entries = {}
    for tool in tools:
        meta = tool.fn_metadata
        name = _model_name(meta.output_model)
        if name is not None and meta.output_schema is not None and not meta.wrap_output:
            entries[tool.name] = {"model": name, "schema": meta.output_schema}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(path, json.dumps({"key": key, "tools": entries}))
    except OSError as exc:  # a read-only state directory: derive again next time
        log.debug("could not keep the tool schemas: %r", exc)
