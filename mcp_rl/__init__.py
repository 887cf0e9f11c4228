"""mcp-rl: an MCP server that runs RL post-training of language models for AI agents."""

from __future__ import annotations

from importlib import metadata
from pathlib import Path

DISTRIBUTION = "mcp-rl"


def _version() -> str:
    """The version of the installed distribution; pyproject.toml's in a checkout run without install.

    pyproject.toml is the one place the version is written: the package metadata is built from it,
    and the server, `mcp-rl --version` and the README read it from there.
    """
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        pass
    import tomllib  # only a checkout that was never installed needs it

    pyproject = Path(__file__).resolve().parent.parent / "pyproject.toml"
    try:
        return str(tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]["version"])
    except (OSError, KeyError, ValueError):
        return "0+unknown"


__version__ = _version()
__all__ = ["__version__"]
