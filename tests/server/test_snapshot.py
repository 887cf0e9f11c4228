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
            diff = list(difflib.unified_diff(want.splitlines(), got.splitlines(), f"snapshot/{path.name}", f"server/{path.name}", lineterm="", n=2))
            shown = diff[:MAX_DIFF_LINES] + ([f"... {len(diff) - MAX_DIFF_LINES} more diff lines"] if len(diff) > MAX_DIFF_LINES else [])
            problems.append("\n".join(shown))
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
