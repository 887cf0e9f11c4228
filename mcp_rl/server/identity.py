"""What the server says about itself in the initialize answer: title, description, website, icons.

The version comes from `mcp_rl.__version__` (package metadata). The website is also written in
pyproject.toml ([project.urls]) and server.json; tests/server/test_identity.py keeps them equal.
"""

from __future__ import annotations

import base64
from functools import lru_cache
from pathlib import Path

from mcp.types import Icon

TITLE = "mcp-rl: RL post-training"
DESCRIPTION = (
    "Reinforcement-learning post-training of language models for agents: find an Atropos or GEM "
    "environment, configure and smoke-test it, train a LoRA on Tinker or the local CPU backend, "
    "watch the run and collect its results and weights."
)
WEBSITE_URL = "https://github.com/mcp-rl/mcp-rl"

ASSETS = Path(__file__).resolve().parent / "assets"


@lru_cache(maxsize=1)
def icons() -> list[Icon]:
    """The icon as data: URIs (nothing to host or fetch): PNG, which every client that shows icons
    must support, and SVG for the ones that scale."""
    png = base64.b64encode((ASSETS / "icon.png").read_bytes()).decode("ascii")
    svg = base64.b64encode((ASSETS / "icon.svg").read_bytes()).decode("ascii")
    return [
        Icon(src=f"data:image/png;base64,{png}", mime_type="image/png", sizes=["64x64"]),
        Icon(src=f"data:image/svg+xml;base64,{svg}", mime_type="image/svg+xml", sizes=["any"]),
    ]
