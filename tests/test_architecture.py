"""The package's shape: no import cycle between mcp_rl's modules nor between its packages,
counting every import (module-level and inside functions), and the package map of
docs/design-notes.md held true: the arrows between packages are exactly the map's, every one
points down the map (none runs back up), and only the programs and `http_serve` import the server.

Importing `pkg.mod` also runs `pkg/__init__.py`; that parent link is not counted as an edge (a
package's `__init__` re-exporting its modules is not a cycle).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent / "mcp_rl"
NOTES = Path(__file__).resolve().parent.parent / "docs" / "design-notes.md"
LAYERS = ("programs", "adapter", "services", "contracts", "base")
ARROW = "─>"
UP = "↑"  # the mark an arrow back up once carried; the map has none now, and may not


def _modules() -> dict[str, Path]:
    found = {}
    for path in ROOT.rglob("*.py"):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def import_graph() -> dict[str, set[str]]:
    modules = _modules()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(parent + ([node.module] if node.module else []))
                for alias in node.names:
                    sub = f"{base}.{alias.name}"
                    targets.append(sub if sub in modules else base)
            graph[name].update(t for t in targets if t in modules and t != name)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_cycle() -> None:
    assert cycles(import_graph()) == []


def test_the_checker_sees_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def package_of(module: str) -> str:
    """`mcp_rl.trainer.loop` -> `trainer`; a top-level module is its own package; `mcp_rl` the
    package's `__init__`."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    packages: dict[str, set[str]] = {package_of(name): set() for name in graph}
    for name, targets in graph.items():
        packages[package_of(name)].update(package_of(t) for t in targets if package_of(t) != package_of(name))
    return packages


def test_no_package_cycle() -> None:
    """Packages by layer: no package reaches itself through others (nine once formed one knot)."""
    assert cycles(package_graph(import_graph())) == []


def test_the_package_checker_sees_a_cycle_through_modules_that_form_none() -> None:
    # modules a.x -> b.y -> a.z: no module cycle, but packages a and b import each other
    graph = {"mcp_rl.a.x": {"mcp_rl.b.y"}, "mcp_rl.b.y": {"mcp_rl.a.z"}, "mcp_rl.a.z": set()}
    assert cycles(graph) == []
    assert cycles(package_graph(graph)) == [["a", "b"]]


class PackageMap:
    """The map block of the design notes: packages top to bottom, each with its arrows, the
    layer it is in, and any arrow marked `↑` (back up: a problem, whatever its reason)."""

    def __init__(self, text: str) -> None:
        section = text[text.index("## Package map") :]
        block = section[section.index("```\n") + 4 :]
        block = block[: block.index("```")]
        self.order: list[str] = []  # top to bottom
        self.arrows: dict[str, set[str]] = {}
        self.up: set[tuple[str, str]] = set()
        self.layer: dict[str, str] = {}
        layer = ""
        current = ""
        for line in block.splitlines():
            if not line.strip():
                continue
            if ARROW in line:
                left, right = line.split(ARROW, 1)
                words = left.split()
                if words[0] in LAYERS:
                    layer = words.pop(0)
                (current,) = words
                self.order.append(current)
                self.layer[current] = layer
                self.arrows[current] = set()
            else:
                right = line  # a wrapped line of the package above
            for target in right.split():
                if target.startswith(UP):
                    target = target[len(UP) :]
                    self.up.add((current, target))
                self.arrows[current].add(target)


def map_problems(the_map: PackageMap, packages: dict[str, set[str]]) -> list[str]:
    """Everything in which the code and the map disagree, in words (empty: they agree)."""
    problems = []
    for name in sorted(set(packages) | set(the_map.arrows)):
        if name not in the_map.arrows:
            problems.append(f"{name} is not in the map")
            continue
        if name not in packages:
            problems.append(f"{name} is in the map but not in the code")
            continue
        for target in sorted(packages[name] - the_map.arrows[name]):
            problems.append(f"{name} -> {target} is in the code, not in the map")
        for target in sorted(the_map.arrows[name] - packages[name]):
            problems.append(f"{name} -> {target} is in the map, not in the code")
    rank = {name: i for i, name in enumerate(the_map.order)}
    for name, targets in the_map.arrows.items():
        for target in sorted(targets):
            if rank.get(target, len(rank)) < rank[name]:
                problems.append(f"{name} -> {target} runs back up the map")
            elif (name, target) in the_map.up:
                problems.append(f"{name} -> {target} is marked {UP} but points down")
    for name, targets in packages.items():
        if "server" in targets and the_map.layer.get(name) != "programs" and name != "http_serve":
            problems.append(f"{name} imports the server: only the programs and http_serve may")
    return problems


def test_the_code_is_the_design_notes_package_map() -> None:
    the_map = PackageMap(NOTES.read_text(encoding="utf-8"))
    assert len(the_map.order) > 30 and not the_map.up
    assert map_problems(the_map, package_graph(import_graph())) == []


def test_the_map_checker_sees_an_added_arrow_a_back_arrow_and_a_server_import() -> None:
    the_map = PackageMap(NOTES.read_text(encoding="utf-8"))
    packages = package_graph(import_graph())
    added = {**packages, "rundir": packages["rundir"] | {"settings"}}
    assert map_problems(the_map, added) == ["rundir -> settings is in the code, not in the map"]
    the_map.arrows["rundir"].add("trainer")
    the_map.arrows["costs"].add("server")
    assert map_problems(
        the_map, {**packages, "rundir": packages["rundir"] | {"trainer"}, "costs": packages["costs"] | {"server"}}
    ) == [
        "costs -> server runs back up the map",
        "rundir -> trainer runs back up the map",
        "costs imports the server: only the programs and http_serve may",
    ]


def test_the_map_checker_refuses_an_arrow_marked_up_even_with_a_reason() -> None:
    """The `↑` mark and a named reason after the map once let an arrow run back up; no longer."""
    text = NOTES.read_text(encoding="utf-8")
    line = "rundir          ─> errors locking"
    assert line in text
    marked = text.replace(line, f"{line} {UP}trainer {UP}settings", 1)
    marked = marked.replace("\n## Layout", "\n- `rundir -> trainer`: a reason.\n\n## Layout", 1)
    the_map = PackageMap(marked)
    assert the_map.up == {("rundir", "trainer"), ("rundir", "settings")}
    packages = package_graph(import_graph())
    assert map_problems(the_map, {**packages, "rundir": packages["rundir"] | {"trainer", "settings"}}) == [
        "rundir -> settings is marked ↑ but points down",
        "rundir -> trainer runs back up the map",
    ]


def uncommented_function_imports(source: str) -> list[int]:
    """Lines of imports inside functions that no comment explains. An import is explained by a
    comment on its line, or on the line above it or above the run of import lines it starts in
    (one comment may explain a group). Function-level imports exist only to keep heavy modules
    off the server's start-up path (or out of a process until it needs them), and say so."""
    lines = source.splitlines()
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for sub in ast.walk(node):
            if not isinstance(sub, ast.Import | ast.ImportFrom):
                continue
            if "#" in lines[sub.lineno - 1]:
                continue
            above = sub.lineno - 2
            while above >= 0 and lines[above].lstrip().startswith(("import ", "from ")):
                above -= 1
            if above < 0 or not lines[above].lstrip().startswith("#"):
                found.append(sub.lineno)
    return sorted(set(found))


def test_every_function_level_import_says_why() -> None:
    unexplained = {
        name: lines
        for path in sorted(ROOT.rglob("*.py"))
        if (lines := uncommented_function_imports(path.read_text(encoding="utf-8")))
        for name in [str(path.relative_to(ROOT.parent))]
    }
    assert unexplained == {}


def test_the_import_checker_sees_an_unexplained_import() -> None:
    source = (
        "def f():\n"
        "    # torch is heavy\n"
        "    import torch\n"
        "    import numpy\n"
        "\n"
        "    import json\n"
        "    import yaml  # light, but explained\n"
    )
    assert uncommented_function_imports(source) == [6]


def environment_reads(source: str) -> list[int]:
    """Lines that read a variable from the process environment: `os.getenv(...)`,
    `os.environ.get(...)`, `os.environ[...]` (loads). Copying the whole environment for a child
    (`dict(os.environ)`) and setting a variable are not reads of our configuration."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            target = ast.unparse(node.func)
            if target in ("os.getenv", "os.environ.get"):
                found.append(node.lineno)
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
            if ast.unparse(node.value) == "os.environ":
                found.append(node.lineno)
    return sorted(found)


# Settings reads our configuration; gsm8k asks whether the user put the Hugging Face hub offline
# (the hub's own variables, not ours). local.py: being reworked in parallel (MCP_RL_TORCH_THREADS
# moves to Settings.torch_threads); remove it from this list when that lands.
READS_THE_ENVIRONMENT = {
    "mcp_rl/settings.py",
    "mcp_rl/environments/bundled/gsm8k.py",
}


def test_every_environment_variable_is_read_in_settings() -> None:
    reads = {
        name: lines
        for path in sorted(ROOT.rglob("*.py"))
        if (name := str(path.relative_to(ROOT.parent))) not in READS_THE_ENVIRONMENT
        if (lines := environment_reads(path.read_text(encoding="utf-8")))
    }
    assert reads == {}


def test_the_environment_checker_sees_reads_and_not_copies() -> None:
    source = (
        "import os\n"
        "a = os.environ.get('A')\n"
        "b = os.getenv('B')\n"
        "c = os.environ['C']\n"
        "env = dict(os.environ)\n"
        "os.environ['D'] = '1'\n"
        "os.environ.setdefault('E', '1')\n"
    )
    assert environment_reads(source) == [2, 3, 4]


# MCPServer's private parts. The one use the design notes name: rl_server.py routes the two legacy
# requests the SDK re-provides only through its low-level server (`logging/setLevel`,
# `resources/subscribe`), as the SDK's extension docs say to.
SDK_PRIVATE = frozenset(
    {"_tool_manager", "_resource_manager", "_prompt_manager", "_lowlevel_server", "_subscriptions", "_extensions"}
)
SDK_PRIVATE_NAMED = {("server/rl_server.py", "_lowlevel_server")}


# getattr and its kin read an attribute by a string, which `node.attr` never sees: a private
# name there (`getattr(session, "_connection", session)`) reads another object's private part, the
# SDK's or any library's, and breaks silently when it is renamed. Our own objects' are `self`/`cls`'s.
BY_NAME = frozenset({"getattr", "hasattr", "setattr", "delattr"})


def _private_name_read(node: ast.AST) -> str | None:
    """The private name a getattr-style call reads off an object other than self/cls."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in BY_NAME):
        return None
    if len(node.args) < 2 or not isinstance(node.args[1], ast.Constant) or not isinstance(node.args[1].value, str):
        return None
    name = node.args[1].value
    owner = node.args[0]
    if not name.startswith("_") or (name.startswith("__") and name.endswith("__")):
        return None
    if isinstance(owner, ast.Name) and owner.id in ("self", "cls"):
        return None
    return name


def sdk_private_reads(source: str) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr in SDK_PRIVATE:
            found.add(node.attr)
        name = _private_name_read(node)
        if name is not None:
            found.add(name)
    return found


def test_no_module_reads_the_sdk_private_parts_but_the_named_one() -> None:
    found = {
        (str(path.relative_to(ROOT)), attr)
        for path in sorted(ROOT.rglob("*.py"))
        for attr in sdk_private_reads(path.read_text(encoding="utf-8"))
    }
    assert found == SDK_PRIVATE_NAMED


def test_the_private_read_checker_sees_one() -> None:
    assert sdk_private_reads("def f(mcp):\n    return mcp._tool_manager.list_tools()\n") == {"_tool_manager"}


@pytest.mark.parametrize(
    "source",
    [
        'def f(session):\n    return getattr(session, "_connection", session)\n',
        'def f(ctx):\n    return hasattr(ctx.session, "_connection")\n',
        'def f(mcp, m):\n    setattr(mcp, "_tool_manager", m)\n',
    ],
)
def test_the_private_read_checker_sees_one_read_by_its_name(source: str) -> None:
    assert sdk_private_reads(source) in ({"_connection"}, {"_tool_manager"})


def test_the_private_read_checker_leaves_our_own_and_public_names() -> None:
    source = (
        "class A:\n"
        "    def f(self, session, cls_):\n"
        '        return getattr(self, "_skipped", False), getattr(session, "client_params", None), '
        'getattr(cls_, "__name__"), getattr(session, name)\n'
    )
    assert sdk_private_reads(source) == set()
