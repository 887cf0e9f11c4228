"""Local OpenEnv environment folders on MCP_RL_ENV_PATHS, listed as `openenv:<name>`.

A folder is an OpenEnv environment when it holds `openenv.yaml` (the layout `openenv init`
makes); its `name` there is the environment's name. Nothing is imported: the manifest is YAML.
An entry is a virtual one, like a GEM id: the bundled `openenv_env.py` with `openenv_dir` preset.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from mcp_rl.environments.discovery import SKIP_DIRS, EnvironmentInfo

PREFIX = "openenv:"
MANIFEST = "openenv.yaml"
ENV_FILE = "openenv_env.py"
# An entry of MCP_RL_ENV_PATHS may be the folder itself, or hold such folders this deep.
MAX_DEPTH = 3


def find_folders(roots: list[Path]) -> list[tuple[str, Path]]:
    """(name, folder) of every OpenEnv environment folder under `roots`, first name wins."""
    found: dict[str, Path] = {}

    def visit(folder: Path, depth: int) -> None:
        manifest = folder / MANIFEST
        if manifest.is_file():
            try:
                spec = yaml.safe_load(manifest.read_text(encoding="utf-8")) or {}
            except (OSError, yaml.YAMLError):
                return
            name = str(spec.get("name") or folder.name) if isinstance(spec, dict) else folder.name
            found.setdefault(name, folder.resolve())
            return
        if depth >= MAX_DEPTH:
            return
        try:
            children = sorted(p for p in folder.iterdir() if p.is_dir())
        except OSError:
            return
        for child in children:
            if child.name.startswith(".") or child.name in SKIP_DIRS or (child / "pyvenv.cfg").exists():
                continue
            visit(child, depth + 1)

    for root in roots:
        if root.is_dir():
            visit(root, 0)
    return sorted(found.items())


def entries(base: EnvironmentInfo, roots: list[Path]) -> list[EnvironmentInfo]:
    """One virtual entry per folder: `base` (the bundled openenv environment) with its folder preset."""
    return [
        base.model_copy(
            update={
                "name": PREFIX + name,
                "select_name": PREFIX + name,
                "qualified_name": None,
                "description": f"OpenEnv environment {name} ({folder}), served by mcp-rl in the openenv interpreter.",
                "preset": {"openenv_dir": str(folder)},
            }
        )
        for name, folder in find_folders(roots)
    ]
