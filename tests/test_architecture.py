"""The package's shape: no import cycle between mcp_rl's modules, counting every import
(module-level and inside functions), and layers that depend downward only.

Importing `pkg.mod` also runs `pkg/__init__.py`; that parent link is not counted as an edge (a
package's `__init__` re-exporting its modules is not a cycle).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "mcp_rl"
# Modules below this line never import the server (the MCP adapter sits on top of everything).
NEVER_IMPORT_SERVER = (
    "mcp_rl.supervisor",
    "mcp_rl.trainer",
    "mcp_rl.environments",
    "mcp_rl.metrics",
    "mcp_rl.inference_test",
    "mcp_rl.config",
    "mcp_rl.runconfig",
    "mcp_rl.rundir",
    "mcp_rl.settings",
    "mcp_rl.processes",
    "mcp_rl.evaluation",
    "mcp_rl.weights",
    "mcp_rl.costs",
    "mcp_rl.background",
    "mcp_rl.locking",
)


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


def test_services_never_import_the_server() -> None:
    upward = {
        (name, target)
        for name, targets in import_graph().items()
        if name.startswith(NEVER_IMPORT_SERVER)
        for target in targets
        if target.startswith("mcp_rl.server")
    }
    assert upward == set()


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
