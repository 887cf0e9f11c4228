"""Environment listing and selection latency on repository-shaped trees (issue 16 targets).

Prints, from the same run:
  * listing a generated 500-file tree (the scan and the static dependency check) (nested folders 4 deep, 60 environment files among helper
    modules, plus folders that are skipped: .git, node_modules, a virtualenv, tests): cold (a
    fresh parse cache; the OS file cache is warm) and warm (the server's parse cache);
    targets: cold < 2 s, warm < 200 ms;
  * selecting the fixture environment `packaged_arithmetic` (a package with relative imports,
    an import-time OpenAI client, configs/ read from the repository root):
      - cold, the way a server does it: the worker starts when the agent lists, and the agent
        selects a few seconds later (--think seconds);
      - cold with the worker started at the select itself (the agent selects at once);
      - cold with a one-shot child per select (MCP_RL_INTROSPECT_WORKER_IDLE=0, as before);
      - restarted server: a new service over the same state dir (the disk cache);
    targets: cold < 3 s, restarted < 1 s ("well under a second").

Run: python bench/bench_environments.py [--rounds 3] [--think 5]
Timings on a shared machine are noisy: compare the rows of one run.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from mcp_rl.config.environment_service import EnvironmentService
from mcp_rl.environments.dependencies import ImportChecker
from mcp_rl.environments.discovery import ScanCache, scan
from mcp_rl.settings import Settings

FIXTURE_ENVS = REPO / "tests" / "fixtures" / "repos" / "research_repo" / "environments"
SELECTED = "packaged_arithmetic"

ENV_TEMPLATE = '''"""Generated environment {i}: a module of realistic size."""
import random
from typing import Any

from atroposlib.envs.base import BaseEnv, BaseEnvConfig
from pydantic import Field

from .helpers_{i} import score


class Config{i}(BaseEnvConfig):
    difficulty: int = Field(default=1, ge=1, description="How hard")


class Env{i}(BaseEnv):
    """Environment number {i}."""

    name = "generated_{name}"
    env_config_cls = Config{i}

    @classmethod
    def config_init(cls):
        return Config{i}(), []

    async def setup(self) -> None:
        self.items = [random.random() for _ in range(100)]

{body}
'''
HELPER_TEMPLATE = '''"""Helper module {i} (no environment here)."""

def score(text: str) -> float:
    return float(len(text) % 7 == 0)

{body}
'''
METHOD = """    async def step_{j}(self, item: Any) -> float:
        total = 0.0
        for k in range(10):
            total += (item * k) % 3
        return total
"""
FUNCTION = """def helper_{j}(x: int) -> int:
    if x > 10:
        return x - 1
    return x + 1
"""


def make_tree(root: Path, files: int = 500, envs: int = 60) -> None:
    """`files` .py files in nested folders (up to 4 deep), `envs` of them environments (some with
    the same name in another folder), plus skipped folders holding environments."""
    rng = random.Random(0)
    folders = [root / f"group_{a}" / f"family_{b}" / f"env_{c}" for a in range(4) for b in range(3) for c in range(4)]
    for i in range(files):
        folder = folders[i % len(folders)] if i % 7 else folders[i % len(folders)].parent
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "__init__.py").touch()
        if i < envs:
            name = str(i % 50)  # 10 names twice: qualified names
            body = "\n".join(METHOD.format(j=j) for j in range(rng.randint(10, 40)))
            (folder / f"env_{i}.py").write_text(ENV_TEMPLATE.format(i=i, name=name, body=body))
        else:
            body = "\n".join(FUNCTION.format(j=j) for j in range(rng.randint(5, 30)))
            (folder / f"helpers_{i - envs}.py").write_text(HELPER_TEMPLATE.format(i=i, body=body))
    for skipped in (".git/objects", "node_modules/pkg", "venv/lib", "group_0/tests"):
        (root / skipped).mkdir(parents=True, exist_ok=True)
        for i in range(20):
            (root / skipped / f"env_skipped_{i}.py").write_text(ENV_TEMPLATE.format(i=i, name=f"x{i}", body=""))
    (root / "venv" / "pyvenv.cfg").write_text("home = /usr\n")


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def listing(root: Path, cache: ScanCache) -> None:
    """What rl_list_environments computes: the scan and the static dependency check."""
    catalog = scan([root], cache)
    checker = ImportChecker()
    for env in catalog.environments:
        checker.missing(env)


def bench_listing(rounds: int) -> tuple[list[float], list[float], int]:
    cold, warm = [], []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "environments"
        make_tree(root)
        count = len(scan([root]).environments)
        for _ in range(rounds):
            cache = ScanCache()
            cold.append(timed(lambda cache=cache: listing(root, cache)))
            warm.extend(timed(lambda cache=cache: listing(root, cache)) for _ in range(5))
    return cold, warm, count


def service(home: Path, worker: bool) -> EnvironmentService:
    env = {
        "MCP_RL_HOME": str(home),
        "MCP_RL_ENV_PATHS": str(FIXTURE_ENVS),
        "MCP_RL_INTROSPECT_WORKER_IDLE": "600" if worker else "0",
    }
    settings = Settings.from_env(env)
    settings.ensure_home()
    return EnvironmentService(settings)


def bench_select(rounds: int, think_s: float) -> dict[str, list[float]]:
    rows: dict[str, list[float]] = {"after list": [], "at once": [], "one-shot": [], "restarted": []}
    for _ in range(rounds):
        with tempfile.TemporaryDirectory() as tmp:
            home = Path(tmp)
            svc = service(home, worker=True)
            svc.catalog()  # rl_list_environments: the worker starts warming
            time.sleep(think_s)  # the agent reads the list
            rows["after list"].append(timed(lambda: svc.select(SELECTED)))
            svc.close()
            restarted = service(home, worker=True)
            rows["restarted"].append(timed(lambda: restarted.select(SELECTED)))
            restarted.close()
        with tempfile.TemporaryDirectory() as tmp:
            svc = service(Path(tmp), worker=True)
            rows["at once"].append(timed(lambda: svc.select(SELECTED)))
            svc.close()
        with tempfile.TemporaryDirectory() as tmp:
            svc = service(Path(tmp), worker=False)
            rows["one-shot"].append(timed(lambda: svc.select(SELECTED)))
    return rows


def row(label: str, times: list[float], target: float | None) -> str:
    med = statistics.median(times)
    verdict = "" if target is None else ("  OK" if med < target else "  MISSED")
    target_text = "" if target is None else f" (target < {target * 1000:.0f} ms)"
    return f"{label:<48} median {med * 1000:8.1f} ms  min {min(times) * 1000:8.1f}  max {max(times) * 1000:8.1f}{target_text}{verdict}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--think", type=float, default=5.0, help="seconds between listing and selecting")
    ns = parser.parse_args()
    cold, warm, count = bench_listing(ns.rounds)
    print(f"listing a generated 500-file tree ({count} environments found):")
    print(row("  cold (fresh parse cache)", cold, 2.0))
    print(row("  warm (server's parse cache)", warm, 0.2))
    rows = bench_select(ns.rounds, ns.think)
    print(f"selecting {SELECTED} (tests/fixtures/repos/research_repo):")
    print(row(f"  cold, worker started by the listing {ns.think:g} s before", rows["after list"], 3.0))
    print(row("  cold, worker started by the select", rows["at once"], 3.0))
    print(row("  cold, one-shot child (no worker; as before)", rows["one-shot"], None))
    print(row("  restarted server (disk cache)", rows["restarted"], 1.0))


if __name__ == "__main__":
    main()
