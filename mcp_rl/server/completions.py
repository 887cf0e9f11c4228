"""completion/complete: values for prompt arguments and resource-template variables.

Only sets that are known and cheap to read: environment names from the scan cache and GEM ids
when the catalog is at hand, run ids from the registry, test ids and model folders from the
tests directory, log process names, config field names. A completion never imports a model
library and never waits long: a slow source (the first GEM listing imports gem in a child
process) gets a short deadline, and the next completion uses what it found.
"""

from __future__ import annotations

import enum
import logging
import sqlite3
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import anyio
from mcp.types import (
    Completion,
    CompletionArgument,
    CompletionContext,
    PromptReference,
    ResourceTemplateReference,
)

from mcp_rl.config import RUN_OPTION_NAMES
from mcp_rl.errors import McpRlError
from mcp_rl.inference_test.models import SLUG_RE, SPEC_FILE
from mcp_rl.inference_test.service import model_catalog
from mcp_rl.server.rl_server import RlServer
from mcp_rl.server.state import AppState
from mcp_rl.supervisor.registry import Registry
from mcp_rl.supervisor.states import LOG_NAMES

log = logging.getLogger(__name__)

MAX_VALUES = 100  # the protocol's limit per answer
SLOW_SOURCE_S = 2.0  # a completion answers while the person types: never wait longer for a source
LIST_SEPARATOR = ","

T = TypeVar("T")


class Source(enum.Enum):
    ENVIRONMENT = "environment"  # Atropos environment names and GEM ids
    RUN = "run"
    TEST = "test"
    TEST_MODEL = "test_model"  # the model folders of one test (needs test_id)
    PROCESS = "process"  # the log names of a run
    CONFIG_FIELD = "config_field"
    MODEL = "model"  # model ids rl_test_inference knows by default


# Argument (prompt) or variable (resource template) name -> (source, a comma-separated list?).
ARGUMENTS: dict[str, tuple[Source, bool]] = {
    "environment": (Source.ENVIRONMENT, False),
    "run_id": (Source.RUN, False),
    "run_ids": (Source.RUN, True),
    "test_id": (Source.TEST, False),
    "model": (Source.TEST_MODEL, False),
    "process": (Source.PROCESS, False),
    "field": (Source.CONFIG_FIELD, False),
    "models": (Source.MODEL, True),
}
# Template variables whose meaning depends on the template.
TEMPLATE_ARGUMENTS: dict[tuple[str, str], tuple[Source, bool]] = {
    ("rl://environments/{+name}", "name"): (Source.ENVIRONMENT, False),
}


def rank(candidates: Iterable[str], typed: str, prefix: str = "") -> Completion:
    """Case-insensitive prefix matches first, then other matches containing the text, each in the
    sources' order (newest runs first); at most MAX_VALUES. `prefix` is put back in front (the
    items of a list argument before the one being typed)."""
    needle = typed.strip().lower()
    starts: list[str] = []
    contains: list[str] = []
    seen: set[str] = set()
    for value in candidates:
        if value in seen:
            continue
        seen.add(value)
        low = value.lower()
        if low.startswith(needle):
            starts.append(value)
        elif needle in low:
            contains.append(value)
    found = starts + contains
    return Completion(
        values=[prefix + v for v in found[:MAX_VALUES]], total=len(found), has_more=len(found) > MAX_VALUES
    )


async def _within(fn: Callable[[], T], default: T) -> T:
    """fn() in a worker thread, or `default` after SLOW_SOURCE_S (the thread finishes on its own
    and fills its cache for the next completion)."""
    result = default
    with anyio.move_on_after(SLOW_SOURCE_S):
        result = await anyio.to_thread.run_sync(fn, abandon_on_cancel=True)
    return result


class Completer:
    """The value sets, read fresh on each call from the services the tools use."""

    def __init__(self, state: AppState) -> None:
        self.state = state
        self.settings = state.settings

    def _environments(self) -> Any:
        return self.state.environments

    async def values(self, source: Source, context: dict[str, str]) -> list[str]:
        try:
            if source is Source.ENVIRONMENT:
                return await self.environment_names()
            if source is Source.RUN:
                return await anyio.to_thread.run_sync(self.run_ids)
            if source is Source.TEST:
                return await anyio.to_thread.run_sync(self.test_ids)
            if source is Source.TEST_MODEL:
                return await anyio.to_thread.run_sync(self.test_models, context.get("test_id", ""))
            if source is Source.PROCESS:
                return list(LOG_NAMES)
            if source is Source.CONFIG_FIELD:
                return await self.config_fields()
            return await anyio.to_thread.run_sync(self.model_ids)
        except (McpRlError, OSError, ValueError, sqlite3.Error) as exc:  # a convenience: a broken source offers nothing
            log.warning("completion source %s failed: %r", source.value, exc)
            return []

    async def environment_names(self) -> list[str]:
        service = self._environments()
        # select_name: what rl_select_environment takes (a qualified folder/name for a duplicate)
        names = [e.select_name or e.name for e in (await anyio.to_thread.run_sync(service.catalog)).environments]
        gem = await _within(service.gem, None)
        if gem is not None and gem.installed:
            names += gem.ids
        return names

    def run_ids(self) -> list[str]:
        if not self.settings.state_db.exists():
            return []
        return [r.run_id for r in Registry(self.settings.state_db).list_runs()]  # newest first

    def test_ids(self) -> list[str]:
        folder = self.settings.tests_dir
        if not folder.is_dir():
            return []
        return sorted((p.name for p in folder.iterdir() if (p / SPEC_FILE).is_file()), reverse=True)  # newest first

    def test_models(self, test_id: str) -> list[str]:
        if test_id not in self.test_ids():
            return []
        folder = self.settings.tests_dir / test_id
        return sorted(p.name for p in folder.iterdir() if p.is_dir() and SLUG_RE.match(p.name))

    async def config_fields(self) -> list[str]:
        service = self._environments()

        def selected_fields() -> list[str]:
            if service.store.read().environment is None:
                return []
            current = service.current()  # the spec is cached on disk once the environment was selected
            return [f.name for f in current.configurable_fields]

        nothing: list[str] = []
        return await _within(selected_fields, nothing) + list(RUN_OPTION_NAMES)

    def model_ids(self) -> list[str]:
        remote, local = model_catalog()
        return [local.id, *(m.id for m in remote)]


def source_of(ref: PromptReference | ResourceTemplateReference, name: str) -> tuple[Source, bool] | None:
    if isinstance(ref, ResourceTemplateReference):
        found = TEMPLATE_ARGUMENTS.get((ref.uri, name))
        if found is not None:
            return found
        if name == "name":  # only rl://environments/{+name} has it
            return None
    return ARGUMENTS.get(name)


def register(mcp: RlServer, state: AppState) -> None:
    completer = Completer(state)

    async def complete(
        ref: PromptReference | ResourceTemplateReference,
        argument: CompletionArgument,
        context: CompletionContext | None,
    ) -> Completion | None:
        found = source_of(ref, argument.name)
        if found is None:
            return None
        source, is_list = found
        known = dict(context.arguments or {}) if context is not None else {}
        typed, prefix = argument.value, ""
        chosen: set[str] = set()
        if is_list and LIST_SEPARATOR in typed:
            head, _, last = typed.rpartition(LIST_SEPARATOR)
            typed = last.lstrip()
            prefix = head + LIST_SEPARATOR + last[: len(last) - len(typed)]  # keep what was typed, spaces too
            chosen = {v.strip() for v in head.split(LIST_SEPARATOR)}
        values = [v for v in await completer.values(source, known) if v not in chosen]  # no item twice
        return rank(values, typed, prefix)

    mcp.set_completer(complete)
