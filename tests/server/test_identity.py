"""What the server says about itself: one version everywhere, title, website and icons in the
initialize answer, and a server.json for the MCP Registry that agrees with the package."""

from __future__ import annotations

import base64
import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from mcp import Client

import mcp_rl
from mcp_rl.server import build_server, identity
from mcp_rl.settings import Settings
from tests.conftest import REPO, make_env

PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
SERVER_JSON = json.loads((REPO / "server.json").read_text(encoding="utf-8"))
# Constraints of https://static.modelcontextprotocol.io/schemas/2025-12-11/server.schema.json and the
# official registry (a PyPI package proves ownership with an `mcp-name:` line in its README).
NAME_RE = re.compile(r"^[a-zA-Z0-9.-]+/[a-zA-Z0-9._-]+$")
VERSION_RANGE_RE = re.compile(r"[\^~<>=*x]|\s|^latest$")


def test_one_version_from_the_package_metadata() -> None:
    assert mcp_rl.__version__ == PYPROJECT["project"]["version"]
    assert SERVER_JSON["version"] == mcp_rl.__version__
    assert [p["version"] for p in SERVER_JSON["packages"]] == [mcp_rl.__version__]
    assert f'"{mcp_rl.__version__}"' not in (REPO / "mcp_rl" / "__init__.py").read_text()  # not written twice


def test_cli_version() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "mcp_rl", "--version"], check=False, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"mcp-rl {mcp_rl.__version__}"


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_initialize_answer_has_title_website_and_icons(home: Path, mode: str) -> None:
    async with Client(build_server(Settings.from_env(make_env(home))), mode=mode) as client:
        info = client.server_info
    assert (info.name, info.version) == ("mcp-rl", mcp_rl.__version__)
    assert info.title == identity.TITLE and info.website_url == identity.WEBSITE_URL
    assert info.description and "post-training" in info.description
    kinds = {icon.mime_type: icon for icon in info.icons or []}
    assert set(kinds) == {"image/png", "image/svg+xml"}
    png = base64.b64decode(kinds["image/png"].src.split(",", 1)[1])
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) < 16_000  # small: it travels in every initialize
    assert b"<svg" in base64.b64decode(kinds["image/svg+xml"].src.split(",", 1)[1])


def test_website_is_written_alike_everywhere() -> None:
    urls = PYPROJECT["project"]["urls"]
    assert identity.WEBSITE_URL == urls["Homepage"] == SERVER_JSON["websiteUrl"]
    assert SERVER_JSON["repository"]["url"] == urls["Repository"]


def test_server_json_fits_the_registry_schema() -> None:
    data = SERVER_JSON
    assert data["$schema"].startswith("https://static.modelcontextprotocol.io/schemas/")
    assert NAME_RE.match(data["name"]) and data["name"].count("/") == 1 and 3 <= len(data["name"]) <= 200
    assert 1 <= len(data["description"]) <= 100
    assert data["title"] == identity.TITLE
    assert not VERSION_RANGE_RE.search(data["version"])
    (package,) = data["packages"]
    assert package["registryType"] == "pypi" and package["identifier"] == PYPROJECT["project"]["name"]
    assert package["transport"] == {"type": "stdio"}
    assert [a.get("value") for a in package["packageArguments"]] == ["serve"]
    settings_source = (REPO / "mcp_rl" / "settings.py").read_text(encoding="utf-8")
    for variable in package["environmentVariables"]:
        assert f'"{variable["name"]}"' in settings_source, f"{variable['name']} is not read by Settings"
        assert variable["description"] and variable["isRequired"] is False  # mcp-rl runs with no key at all
        assert variable.get("isSecret", False) == variable["name"].endswith("_API_KEY")


def test_readme_carries_the_registry_ownership_marker() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert f"mcp-name: {SERVER_JSON['name']}" in readme
