"""Shared test fixtures: a fresh state directory per test and settings pointing at it.

Tiers: `pytest` runs the fast tier (no model, no training; `addopts` deselects `slow` and
`live`); `pytest -m slow` runs the end-to-end tier; `pytest -m live` the opt-in tests against the
real paid services (skipped without keys). Every test has a timeout (pyproject: fast; the slow
tier gets `SLOW_TIMEOUT_S`).
"""

from __future__ import annotations

import os

# Tests are offline (this machine and CI have no hub access). Set here, once, before any test
# module imports huggingface_hub, transformers or datasets, which read these at import time. The
# product itself never forces offline mode on users.
for _name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
    os.environ[_name] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import gc  # noqa: E402
import sys  # noqa: E402
import weakref  # noqa: E402
from collections.abc import Iterator  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import pytest  # noqa: E402

from mcp_rl.settings import Settings  # noqa: E402

FIXTURES = Path(__file__).parent / "fixtures"
REPO = Path(__file__).resolve().parent.parent
# Stands in for MCP_RL_MODEL in tests that did not ask for the model: resolving "default" then
# fails at once with a clear error instead of silently converting the model into a test home.
NO_MODEL = FIXTURES / "no-model-requested-use-the-model_dir-fixture"
SLOW_TIMEOUT_S = 900
# Worker processes for the fast tier (pyproject: `-n auto`, pytest-xdist). Its tests mostly wait
# on child processes, servers and deadlines, so parallel processes fill the idle CPU and the tier
# fits its 5-minute budget on 2 cores: three processes took 274 s where two took 295 s, side by
# side on 2 cores (2026-11-28, 1,118 tests). Overridden by PYTEST_XDIST_AUTO_NUM_WORKERS or `-n N`.
FAST_TIER_WORKERS = 3
# Worker processes for the slow tier: its tests train on one thread each and spend much of their
# time waiting (process start-up, deadlines, servers coming up, the hosts' Node clients), so two
# files at once on 2 cores take about half the wall time (measured: ~35 of ~65 minutes).
SLOW_TIER_WORKERS = 2

# The slow tier's longest files, as measured on a clean clone on 2 cores (2026-11-28, seconds of
# their tests' calls): started first. Others follow in collection order; a stale figure only
# costs balance.
SLOW_FILE_SECONDS = {
    "tests/tasks/test_length_monitor.py": 170,
    "tests/tasks/test_task_run.py": 161,
    "tests/environments/test_reasoning_gym_runs.py": 155,
    "tests/environments/test_verifiers_e2e.py": 150,
    "tests/mcp_family/test_memory_server_training.py": 138,
    "tests/environments/test_openenv_e2e.py": 138,
    "tests/evaluation/test_report_styles_e2e.py": 131,
    "tests/evaluation/test_own_evaluate.py": 120,
    "tests/tasks/test_collapse_verdict.py": 120,
    "tests/cluster/test_slurm_runs.py": 102,
    "tests/gem/test_gem_training.py": 80,
    "tests/secrets/test_run_keys.py": 73,
}

_converted_model: Path | None = None


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """`-n auto`: parallel processes for the fast tier (tests spread one by one) and the slow
    tier (whole files per process, `pytest_collection_modifyitems`: a file's tests share its
    module fixtures, such as a served model; the files reading the shared completed run go to one
    process, which makes it once); one process for the live tier and for runs of named files."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None  # xdist's own hook reads it
    if any(".py" in arg for arg in config.args):
        return 0
    markexpr = config.option.markexpr or ""
    if "not slow" in markexpr:
        return FAST_TIER_WORKERS
    if markexpr.strip() == "slow":
        if config.option.dist == "no":
            config.option.dist = "loadgroup"
            config.option.loadscopereorder = False  # keep the longest-first order (below)
        return SLOW_TIER_WORKERS
    return 0


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("slow") is not None:
            # End-to-end tests load the model and train: they get it, and a longer timeout.
            if "model_dir" not in item.fixturenames:
                item.fixturenames.append("model_dir")
            if item.get_closest_marker("timeout") is None:
                item.add_marker(pytest.mark.timeout(SLOW_TIMEOUT_S))
            # One process per file (or per shared run) when the slow tier runs in parallel.
            shared = "completed_run" in item.fixturenames
            item.add_marker(pytest.mark.xdist_group("completed_run" if shared else item.nodeid.split("::")[0]))
    # Longest first: the two slow-tier processes then finish close together instead of one
    # running a 3-minute file alone at the end (xdist hands out groups in this order).
    items.sort(key=lambda item: -SLOW_FILE_SECONDS.get(item.nodeid.split("::")[0], 0.0))


_open_async_openai: weakref.WeakSet[Any] = weakref.WeakSet()


@pytest.fixture(scope="session", autouse=True)
def _watch_async_openai_clients() -> Iterator[None]:
    """Remember every `openai.AsyncOpenAI` a test creates (Atropos makes one per server config
    when an environment is built in this process, and never closes it)."""
    import openai

    original = openai.AsyncOpenAI.__init__

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        _open_async_openai.add(self)

    openai.AsyncOpenAI.__init__ = init  # type: ignore[method-assign]
    yield
    openai.AsyncOpenAI.__init__ = original  # type: ignore[method-assign]


@pytest.fixture(autouse=True)
def _collect_unclosed_async_openai_clients() -> Iterator[None]:
    """Free a test's unclosed AsyncOpenAI clients before the next test starts its event loop.

    The openai SDK's client schedules its own `aclose()` on whatever loop is running when the
    garbage collector frees it. Freed during a later test, that close runs on the later test's
    loop against a socket of a closed loop, and anyio fails the later, innocent test ("Event loop
    is closed"; it failed CI once). Collected here, between tests, no loop runs and the SDK skips
    the close. Only around a test when one is open: a full collection costs ~0.2 s.
    """

    def collect() -> None:
        if any(not client.is_closed() for client in list(_open_async_openai)):
            gc.collect()

    collect()  # one a module fixture held until just now
    yield
    collect()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def home(tmp_path: Path) -> Path:
    path = tmp_path / "home"
    path.mkdir()
    return path


def make_env(home: Path, **extra: str) -> dict[str, str]:
    """Environment variables for a server or child under test: only what we choose.

    MCP_RL_MODEL is the converted default model in tests that asked for it (`model_dir`), so
    every test home shares one conversion; elsewhere it points nowhere (`NO_MODEL`).
    """
    env = {
        "MCP_RL_HOME": str(home),
        "MCP_RL_STATUS_MIN_INTERVAL": "0",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        # No warm introspection worker per test server (each imports atroposlib: seconds of CPU
        # on a shared machine); tests of the worker turn it on.
        "MCP_RL_INTROSPECT_WORKER_IDLE": "0",
        "MCP_RL_MODEL": os.environ.get("MCP_RL_MODEL") or str(NO_MODEL),
    }
    env.update(extra)
    return env


@pytest.fixture(scope="session")
def default_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The embedded default model: the one `scripts/bootstrap` converted into this machine's model
    cache when it is complete there (the tests only read it), else converted once per test session
    into a temporary home (~20 s, and ~35 s of a worker's time beside the others).

    A developer may point MCP_RL_MODEL at a converted folder instead.
    """
    given = os.environ.get("MCP_RL_MODEL")
    if given:
        return Path(given)
    from mcp_rl.models import COMPLETE_MARKER, default_model_dir, resolve_model

    cached = default_model_dir(Settings.from_env())
    if (cached / COMPLETE_MARKER).is_file():
        return cached

    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # shared by the session's worker processes: converted once (models.py locks it)
    return resolve_model(Settings.from_env({"MCP_RL_HOME": str(root / "model-home")}), "default")


@pytest.fixture(scope="session")
def completed_run(default_model: Path, tmp_path_factory: pytest.TempPathFactory):
    """One short real run, completed, shared by the end-to-end tests that only read it."""
    # tests.kit.shared_run imports this module (make_env, stdio_params)
    from tests.kit.shared_run import make_completed_run

    home = tmp_path_factory.mktemp("shared-run") / "home"
    home.mkdir()
    return make_completed_run(home, default_model)


@pytest.fixture
def model_dir(default_model: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Opt in to the real model: MCP_RL_MODEL names it for this test and its children."""
    monkeypatch.setenv("MCP_RL_MODEL", str(default_model))
    yield default_model


@pytest.fixture(scope="session")
def tiny_tokenizer(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A tiny tokenizer folder (w0..w255, EOS 1): what the loopback Tinker serves (tests/kit/tinker_wire.py)."""
    # only the tests that ask for it import the fake (and numpy)
    from tests.fakes.tinker_server import write_tiny_tokenizer

    return write_tiny_tokenizer(tmp_path_factory.mktemp("tokenizer"))


@pytest.fixture
def settings(home: Path) -> Settings:
    return Settings.from_env(make_env(home))


def stdio_params(home: Path, **extra: str):
    """Parameters for the real server as a stdio subprocess (the SDK passes only a minimal env)."""
    from mcp import StdioServerParameters

    env = make_env(home, **extra)
    env["PATH"] = os.environ.get("PATH", "")
    return StdioServerParameters(command=sys.executable, args=["-m", "mcp_rl", "serve"], env=env, cwd=str(REPO))
