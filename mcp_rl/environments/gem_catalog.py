"""The GEM environments (`gem-llm`) known to this machine, without importing gem here.

GEM registers its environments when `gem` is imported (170+ of them, some in loops over
reasoning_gym's datasets), so the list can only be read by importing it — which takes seconds
and pulls in heavy modules. The MCP server therefore reads it in a child process
(`gem_catalog_child`) once per installed gem-llm version and caches the JSON in
`<cache_dir>/gem/`; later reads cost one file read.

A GEM id (`game:GuessTheNumber-v0-easy`) is selected like an Atropos environment: it is a
virtual entry of the catalog pointing at the bundled `gem_env.py` with `env_id` preset.
"""

from __future__ import annotations

import difflib
import importlib.metadata
import sys
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from mcp_rl.atomic import write_text_atomic
from mcp_rl.environments.child import run_json_child
from mcp_rl.errors import NotFound, UserError
from mcp_rl.settings import Settings, bundled_environments_dir

DISTRIBUTION = "gem-llm"
GEM_ENV_FILE = "gem_env.py"
GEM_ENV_CLASS = "GemEnv"
INSTALL_HINT = "pip install 'mcp-rl[gem]' (or pip install gem-llm)"
# Bump when the child's output format changes, so stale cache entries are not trusted.
CACHE_FORMAT = 2  # 2: rg: ids are mcp-rl's reasoning-gym environment
EXAMPLES_PER_GROUP = 3


class GemEntry(BaseModel):  # type: ignore[no-redef]  # field `kwargs` vs the pydantic plugin's __init__(**kwargs)
    id: str
    group: str
    entry_point: str
    kwargs: dict[str, Any] = {}
    description: str
    needs: str | None = None


class GemGroup(BaseModel):
    prefix: str
    count: int
    examples: list[str]


class GemCatalog(BaseModel):
    installed: bool
    version: str | None = None
    entries: list[GemEntry] = []
    error: str | None = None

    def get(self, env_id: str) -> GemEntry | None:
        for entry in self.entries:
            if entry.id == env_id:
                return entry
        return None

    @property
    def ids(self) -> list[str]:
        return [e.id for e in self.entries]

    def groups(self) -> list[GemGroup]:
        by_prefix: dict[str, list[str]] = {}
        for entry in self.entries:
            by_prefix.setdefault(entry.group, []).append(entry.id)
        return [
            GemGroup(prefix=prefix, count=len(ids), examples=ids[:EXAMPLES_PER_GROUP])
            for prefix, ids in sorted(by_prefix.items(), key=lambda kv: (-len(kv[1]), kv[0]))
        ]

    def search(self, text: str | None) -> list[GemEntry]:
        """Entries whose id, group or description contains `text` (case-insensitive); every
        entry for None, '' or 'gem'."""
        if not text or text.strip().lower() in ("gem", "*"):
            return list(self.entries)
        needle = text.strip().lower()
        return [e for e in self.entries if needle in f"{e.id}\n{e.group}\n{e.description}".lower()]

    def closest(self, env_id: str, n: int = 5) -> list[str]:
        lowered = {i.lower(): i for i in self.ids}
        needle = env_id.lower()
        # A family name alone ("wordle", "game:sudoku") first, then near-misspellings.
        close = [i for i in lowered if needle in i][:n]
        for match in difflib.get_close_matches(needle, list(lowered), n=n, cutoff=0.5):
            if match not in close and len(close) < n:
                close.append(match)
        return [lowered[c] for c in close]


def gem_env_file() -> Path:
    return bundled_environments_dir() / GEM_ENV_FILE


def installed_version() -> str | None:
    try:
        return importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return None


def looks_like_gem_id(name: str) -> bool:
    """GEM ids are `<prefix>:<name>`; Atropos environment names never contain a colon."""
    return ":" in name


def _cache_path(settings: Settings, version: str) -> Path:
    safe = "".join(c if c.isalnum() or c in ".-_" else "_" for c in version)
    return (
        settings.cache_dir / "gem" / f"catalog-{safe}-{CACHE_FORMAT}-py{sys.version_info[0]}{sys.version_info[1]}.json"
    )


def load_catalog(settings: Settings) -> GemCatalog:
    """GEM's registered environments: from the cache, else read by a child process.

    Never raises for a missing or broken GEM: the catalog says so in `installed`/`error`.
    """
    version = installed_version()
    if version is None:
        return GemCatalog(installed=False, error=f"GEM is not installed: {INSTALL_HINT}.")
    cached = _cache_path(settings, version)
    if cached.exists():
        try:
            return GemCatalog.model_validate_json(cached.read_text(encoding="utf-8"))
        except ValueError:
            cached.unlink(missing_ok=True)  # damaged: read again below
    try:
        raw = _run_child(settings)
    except UserError as exc:
        return GemCatalog(installed=True, version=version, error=str(exc))
    catalog = GemCatalog(installed=True, version=version, entries=[GemEntry.model_validate(e) for e in raw["entries"]])
    write_text_atomic(cached, catalog.model_dump_json())
    return catalog


def _run_child(settings: Settings) -> dict[str, Any]:
    data = run_json_child(
        settings,
        "mcp_rl.environments.gem_catalog_child",
        [],
        doing="Listing the GEM environments (importing gem)",
        timeout_hint="Check the gem-llm install",
    )
    if not isinstance(data, dict) or not isinstance(data.get("entries"), list):
        raise UserError("The GEM listing is malformed.")
    return data


def unknown_gem_id(env_id: str, catalog: GemCatalog) -> NotFound | UserError:
    """The error for an id GEM does not know, naming the closest registered ids."""
    if not catalog.installed or catalog.error:
        return UserError(f"{env_id!r} looks like a GEM environment id, but {catalog.error}")
    close = catalog.closest(env_id)
    hint = f" Closest matches: {', '.join(close)}." if close else ""
    return NotFound(
        f"Unknown GEM environment {env_id!r}.{hint} List them with rl_list_environments(filter=...) "
        "or read rl://environments/gem."
    )
