"""The public surface as clients see it: the full tools/list, prompts/list, resources/list and
resources/templates/list answers, compared with the JSON files in tests/server/snapshots/.

Any change to a name, title, description, schema, annotation, argument or URI shows up here as
a diff to review. After an intended change, regenerate the files and commit them with it:

    MCP_RL_UPDATE_SNAPSHOTS=1 .venv/bin/pytest tests/server/test_snapshot.py
"""

from __future__ import annotations

import difflib
import json
import os
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from mcp_rl.server import build_server
from mcp_rl.settings import Settings

pytestmark = pytest.mark.anyio

SNAPSHOTS = Path(__file__).parent / "snapshots"
UPDATE_ENV = "MCP_RL_UPDATE_SNAPSHOTS"
MAX_DIFF_LINES = 200


def _wire(items: list[Any]) -> list[dict[str, Any]]:
    """The items as they travel (camelCase, no nulls)."""
    return [item.model_dump(mode="json", by_alias=True, exclude_none=True) for item in items]


async def _surface(home: Path) -> dict[str, list[dict[str, Any]]]:
    # Only the state directory is set: no keys, every other setting at its default, whatever
    # the environment running the tests holds (descriptions may mention defaults).
    settings = Settings.from_env({"MCP_RL_HOME": str(home)})
    async with Client(build_server(settings), mode="legacy") as client:
        return {
            "tools_list": _wire((await client.list_tools()).tools),
            "prompts_list": _wire((await client.list_prompts()).prompts),
            "resources_list": _wire((await client.list_resources()).resources),
            "resource_templates_list": _wire((await client.list_resource_templates()).resource_templates),
        }


def _text(data: Any) -> str:
    return json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def _changed_part(old: str, new: str, context: int = 50) -> str:
    """For long one-line values (descriptions): only the part that differs, with some context."""
    start = 0
    while start < min(len(old), len(new)) and old[start] == new[start]:
        start += 1
    end = 0
    while end < min(len(old), len(new)) - start and old[-1 - end] == new[-1 - end]:
        end += 1
    lo = max(0, start - context)
    return f"    was: ...{old[lo : len(old) - end + context]}...\n    now: ...{new[lo : len(new) - end + context]}..."


def _diff(want: str, got: str, name: str) -> str:
    lines = list(
        difflib.unified_diff(
            want.splitlines(), got.splitlines(), f"snapshot/{name}", f"server/{name}", lineterm="", n=2
        )
    )
    shown = lines[:MAX_DIFF_LINES] + (
        [f"... {len(lines) - MAX_DIFF_LINES} more diff lines"] if len(lines) > MAX_DIFF_LINES else []
    )
    # Long lines that changed a little: say where.
    removed = [line[1:] for line in lines if line.startswith("-") and not line.startswith("---")]
    added = [line[1:] for line in lines if line.startswith("+") and not line.startswith("+++")]
    hints = [_changed_part(a, b) for a, b in zip(removed, added) if max(len(a), len(b)) > 160][:10]
    return "\n".join(shown + (["", "Where the long lines changed:", *hints] if hints else []))


async def test_public_surface_matches_the_snapshots(home: Path) -> None:
    surface = await _surface(home)
    if os.environ.get(UPDATE_ENV):
        SNAPSHOTS.mkdir(exist_ok=True)
        for name, data in surface.items():
            (SNAPSHOTS / f"{name}.json").write_text(_text(data), encoding="utf-8")
        pytest.skip(f"snapshots written to {SNAPSHOTS}; review `git diff` and commit them")
    problems = []
    for name, data in surface.items():
        path = SNAPSHOTS / f"{name}.json"
        if not path.exists():
            problems.append(f"{path.name}: missing")
            continue
        want, got = path.read_text(encoding="utf-8"), _text(data)
        if want != got:
            problems.append(_diff(want, got, path.name))
    if problems:
        pytest.fail(
            "The public MCP surface changed (- snapshot, + server). If that is intended, regenerate with\n"
            f"    {UPDATE_ENV}=1 .venv/bin/pytest tests/server/test_snapshot.py\n"
            "and commit tests/server/snapshots/ with the change.\n\n" + "\n\n".join(problems),
            pytrace=False,
        )


async def test_snapshot_order_is_stable(home: Path) -> None:
    """Two servers list the same surface in the same order (clients and the snapshot rely on it)."""
    assert _text(await _surface(home)) == _text(await _surface(home))
