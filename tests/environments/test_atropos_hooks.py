"""The Atropos hooks (mcp_rl.environments.atropos_hooks): one module patches library objects,
each hook wraps once (a second install changes nothing) and always calls the original."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest

from mcp_rl.environments import atropos_hooks

PACKAGE = Path(atropos_hooks.__file__).parents[1]
LIBRARIES = ("atroposlib", "wandb", "transformers")


def library_patches(source: str) -> list[int]:
    """Lines assigning an attribute of a library object (a name imported from atroposlib, wandb or
    transformers), of a `cls` parameter, or of either through setattr()."""
    tree = ast.parse(source)
    names = {"cls"}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in LIBRARIES:
            names.update(alias.asname or alias.name for alias in node.names)
        elif isinstance(node, ast.Import):
            names.update(a.asname or a.name for a in node.names if a.name.split(".")[0] in LIBRARIES)
    lines = []
    for node in ast.walk(tree):
        targets = node.targets if isinstance(node, ast.Assign) else []
        for target in targets:
            if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id in names:
                lines.append(node.lineno)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr":
            first = node.args[0] if node.args else None
            if isinstance(first, ast.Name) and first.id in names:
                lines.append(node.lineno)
    return lines


def test_only_the_hooks_module_patches_a_library() -> None:
    found = {
        path.relative_to(PACKAGE).as_posix(): lines
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.name != "atropos_hooks.py" and (lines := library_patches(path.read_text(encoding="utf-8")))
    }
    assert found == {}, f"library objects patched outside environments/atropos_hooks.py: {found}"


def test_the_patch_finder_sees_each_form() -> None:
    assert library_patches("from atroposlib.envs.base import BaseEnv\nBaseEnv.wandb_log = f\n") == [2]
    assert library_patches("import wandb\nwandb.log = f\n") == [2]
    assert library_patches("def install(cls):\n    cls.evaluate = f\n") == [2]
    assert library_patches("def install(cls):\n    setattr(cls, 'evaluate', f)\n") == [2]
    assert library_patches("class A:\n    def f(self):\n        self.x = 1\n") == []


class Env:
    calls: list[str] = []

    async def collect_trajectories(self, item: Any) -> Any:
        self.calls.append(f"original {item}")
        if item == "bad":
            raise ValueError("bad item")
        return {"scores": [1.0]}, []

    @classmethod
    def config_init(cls) -> tuple[str, list[str]]:
        return "config", ["server"]


@pytest.mark.anyio
async def test_a_hook_installed_twice_wraps_once_and_always_calls_the_original() -> None:
    seen: list[str] = []

    class Mine(Env):
        pass

    for _ in range(2):
        atropos_hooks.around_collect_trajectories(
            Mine, lambda result: seen.append("returned"), lambda exc: seen.append(f"raised {exc}")
        )
    assert atropos_hooks.hooked(Mine.collect_trajectories) and not atropos_hooks.hooked(Env.collect_trajectories)
    env = Mine()
    Env.calls = []
    assert await env.collect_trajectories("good") == ({"scores": [1.0]}, [])
    with pytest.raises(ValueError, match="bad item"):
        await env.collect_trajectories("bad")
    assert seen == ["returned", "raised bad item"] and Env.calls == ["original good", "original bad"]

    class Other(Env):
        pass

    for suffix in ("first", "second"):
        atropos_hooks.around_config_init(Other, lambda original, s=suffix: (*original(), s))
    assert Other.config_init() == ("config", ["server"], "first")
