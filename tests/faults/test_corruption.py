"""Corruption matrix (issue 18): each state file damaged each way, through the real MCP tools.

For every (file, damage) pair a home holds two finished runs and a selected environment with an
edit; one file is then damaged and the agent's tools are called. Each case asserts:
- every answer is a clear message (a result, or an error naming what failed): never a bare
  "Error executing tool";
- nothing is lost: the damaged bytes are still on disk (in place or kept aside), never deleted;
- readable data stays readable: the other run in full, and whatever of the damaged run's record
  was not in the damaged file.
Fast tier: no model, no training; runs are written in the trainer's file formats.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, MCPError

from mcp_rl.config.environment_service import EnvironmentService
from mcp_rl.server import build_server
from mcp_rl.settings import Settings
from tests.conftest import FIXTURES, REPO, make_env, stdio_params
from tests.kit.runs import write_run

pytestmark = pytest.mark.anyio

RUN_FILES = ("run.yaml", "metrics.jsonl", "trainer_status.json", "checkpoints.jsonl")
FILES = ("state.db", "session.json", *RUN_FILES)
WAYS = ("garbage", "truncated", "directory", "empty", "wrong types", "non-UTF-8")
DAMAGED_RUN = "done1"
OTHER_RUN = "other1"


def _env(home: Path) -> dict[str, str]:
    return make_env(home, MCP_RL_ENV_PATHS=str(FIXTURES / "envs" / "good"))


@pytest.fixture(scope="module")
def warm_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The fixture environment introspected once; each home copies the cache (no child per test)."""
    home = tmp_path_factory.mktemp("warm") / "home"
    settings = Settings.from_env(_env(home))
    settings.ensure_home()
    EnvironmentService(settings).select("counting")
    return settings.cache_dir


@pytest.fixture
def settings(tmp_path: Path, warm_cache: Path) -> Settings:
    settings = Settings.from_env(_env(tmp_path / "home"))
    settings.ensure_home()
    shutil.copytree(warm_cache, settings.cache_dir, dirs_exist_ok=True)
    write_run(settings, DAMAGED_RUN, 4, env_metrics=True)
    write_run(settings, OTHER_RUN, 3)
    environments = EnvironmentService(settings)
    environments.select("counting")
    environments.edit("max_count", 42)
    environments.edit("total_steps", 7)
    db = sqlite3.connect(settings.state_db)
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # the rows in the main file, as after a clean close
    db.close()
    return settings


# --- the damage ------------------------------------------------------------------------------
WRONG_TYPES = {
    "session.json": json.dumps({"environment": 5, "edits": ["max_count"], "run_options": {"total_steps": "many"}}),
    "run.yaml": "run_id: [1, 2]\nenvironment: 7\ntrainer: fast\n",
    "metrics.jsonl": "\n".join([json.dumps([1, 2]), json.dumps({"step": "one", "reward/mean": "high"}), "7"]) + "\n",
    "trainer_status.json": json.dumps({"phase": 5, "step": "three", "num_steps": [4], "heartbeat": "now", "pid": "x"}),
    "checkpoints.jsonl": "\n".join([json.dumps({"step": "last", "kind": 3}), json.dumps(["x"])]) + "\n",
}


def _path(settings: Settings, name: str) -> Path:
    if name == "state.db":
        return settings.state_db
    if name == "session.json":
        return settings.session_file
    return settings.runs_dir / DAMAGED_RUN / name


def damage(settings: Settings, name: str, way: str) -> bytes | None:
    """Damage one file; returns the bytes now in it (None for a directory)."""
    path = _path(settings, name)
    if name == "state.db":
        for suffix in ("-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
    original = path.read_bytes()
    if way == "garbage":
        data = bytes(range(256)) * 8
    elif way == "truncated":
        data = original[: len(original) // 2]
    elif way == "empty":
        data = b""
    elif way == "directory":
        path.unlink()
        path.mkdir()
        (path / "inside.txt").write_text("kept")
        return None
    elif way == "wrong types":
        if name == "state.db":  # a row whose values are not what a run row holds
            db = sqlite3.connect(path, isolation_level=None)
            db.execute(f"UPDATE runs SET state = 'exploded', created_at = 'noon' WHERE run_id = '{DAMAGED_RUN}'")
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            db.close()
            return path.read_bytes()
        data = WRONG_TYPES[name].encode()
    elif way == "non-UTF-8":
        if name == "state.db":
            db = sqlite3.connect(path, isolation_level=None)
            db.execute(f"UPDATE runs SET environment = X'fffe80' WHERE run_id = '{DAMAGED_RUN}'")
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            db.close()
            return path.read_bytes()
        # An invalid byte inside the first string value: the rest of the file stays well-formed.
        quote = original.index(b'"' if name != "run.yaml" else b":") + 1
        data = original[:quote] + b"\xff\xfe" + original[quote:]
    else:
        raise AssertionError(way)
    path.write_bytes(data)
    return data


def _kept(settings: Settings, name: str, data: bytes | None) -> bool:
    """The damaged content is still somewhere in the state directory (in place or aside)."""
    home = settings.home
    if data is None:
        return any((p / "inside.txt").is_file() for p in home.rglob("*") if p.is_dir())
    if len(data) == 0:
        return True  # nothing to keep
    return any(p.is_file() and p.read_bytes() == data for p in home.rglob("*") if "cache" not in p.parts)


# --- the agent's calls -----------------------------------------------------------------------
async def _call(client: Client, tool: str, args: dict[str, Any] | None = None) -> tuple[bool, Any, str]:
    result = await client.call_tool(tool, args or {})
    text = " ".join(getattr(c, "text", "") for c in result.content)
    return result.is_error, result.structured_content, text


async def _read(client: Client, uri: str) -> tuple[bool, str]:
    try:
        result = await client.read_resource(uri)
    except MCPError as exc:
        return True, str(exc)
    return False, " ".join(getattr(c, "text", "") or "" for c in result.contents)


def _clear(text: str) -> bool:
    """A message an agent can act on: not the SDK's bare "Error executing tool <name>" (what an
    unexpected exception becomes), nor a traceback."""
    message = re.sub(r"^Error executing tool \S+(: )?", "", text.strip())
    return len(message) >= 20 and "Traceback" not in text


@pytest.mark.parametrize("way", WAYS)
@pytest.mark.parametrize("name", FILES)
async def test_each_state_file_damaged_each_way(settings: Settings, name: str, way: str) -> None:
    data = damage(settings, name, way)
    answers: dict[str, tuple[bool, str]] = {}
    async with Client(build_server(settings)) as client:
        error, runs, text = await _call(client, "rl_list_runs")
        answers["rl_list_runs"] = (error, text)
        error, status, text = await _call(client, "rl_check_status", {"run_id": DAMAGED_RUN})
        answers["rl_check_status"] = (error, text)
        error, results, text = await _call(client, "rl_get_results", {"run_id": DAMAGED_RUN, "include_plot": False})
        answers["rl_get_results"] = (error, text)
        error, other, text = await _call(client, "rl_get_results", {"run_id": OTHER_RUN, "include_plot": False})
        answers["rl_get_results other"] = (error, text)
        for tool, args in (
            ("rl_read_log", {"run_id": DAMAGED_RUN}),
            ("rl_wait_for_run", {"run_id": DAMAGED_RUN, "timeout_s": 1}),
        ):
            error, _, text = await _call(client, tool, args)
            answers[tool] = (error, text)
        error, current, text = await _call(client, "rl_get_current_config")
        answers["rl_get_current_config"] = (error, text)
        error, _, text = await _call(client, "rl_edit_config", {"field": "max_count", "value": 43})
        answers["rl_edit_config"] = (error, text)
        for uri in (
            "rl://runs",
            f"rl://runs/{DAMAGED_RUN}",
            f"rl://runs/{DAMAGED_RUN}/config",
            f"rl://runs/{DAMAGED_RUN}/metrics",
            "rl://config/current",
        ):
            answers[uri] = await _read(client, uri)

    for what, (_error, text) in answers.items():
        assert _clear(text), f"{name} {way}: {what} answered {text[:300]!r}"
    assert _kept(settings, name, data), f"{name} {way}: the damaged content is gone"

    # The runs' tools work whatever file is damaged; the other run is read in full.
    assert not answers["rl_list_runs"][0] and not answers["rl_get_results other"][0], answers
    assert other["steps_completed"] == 3 and other["metrics"]["reward/mean"]["final_step"] == 3
    listed = {r["run_id"] for r in runs["runs"]}
    assert OTHER_RUN in listed
    if not (name == "state.db" and way in ("wrong types", "non-UTF-8")):
        assert DAMAGED_RUN in listed, f"{name} {way}: {runs}"  # only a damaged row is skipped, and said so
    else:
        assert any(DAMAGED_RUN in note for note in runs["notes"]), runs
    if name != "state.db" or way not in ("wrong types", "non-UTF-8"):
        assert not answers["rl_check_status"][0] and not answers["rl_get_results"][0], answers
        # What the damaged file did not hold is still read.
        if name != "metrics.jsonl":
            assert results["steps_completed"] == 4, results
        if name != "checkpoints.jsonl":
            assert results["weights"]["sampler_weights"], results
        if name in RUN_FILES and way not in ("truncated", "empty") and name != "run.yaml":
            assert results["notes"] or status["notes"], f"{name} {way}: the damage is not mentioned"
    # The session's tools either work (the damage was repaired, with a note) or say what to do.
    if name == "session.json":
        error, text = answers["rl_get_current_config"]
        assert error and "rl_select_environment" in text or not error and ("session.json" in text or way == "empty"), (
            text
        )
    else:
        assert not answers["rl_get_current_config"][0] and not answers["rl_edit_config"][0], answers
        assert {f["name"]: f["current_value"] for f in current["configurable_fields"]}["max_count"] == 42


# --- several processes on one damaged home ---------------------------------------------------
async def test_two_servers_and_the_cli_on_one_damaged_state_db_repair_it_once(settings: Settings) -> None:
    garbage = b"garbage, not a database" * 100
    settings.state_db.write_bytes(garbage)
    listed: list[list[str]] = []

    async def server() -> None:  # the real server over stdio; its start-up reconciles too
        async with Client(stdio_params(settings.home, MCP_RL_ENV_PATHS=str(FIXTURES / "envs" / "good"))) as client:
            result = await client.call_tool("rl_list_runs", {})
            assert not result.is_error, result.content[0].text
            listed.append(sorted(r["run_id"] for r in result.structured_content["runs"]))

    async def cli() -> None:
        done = await anyio.run_process(
            [sys.executable, "-m", "mcp_rl", "runs", "list", "--json"],
            env={**_env(settings.home), "PATH": os.environ.get("PATH", "")},
            cwd=REPO,
            check=False,
        )
        assert done.returncode == 0, done.stderr.decode()
        listed.append(sorted(r["run_id"] for r in json.loads(done.stdout)["runs"]))

    with anyio.fail_after(120):
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(server)
            tasks.start_soon(server)
            tasks.start_soon(cli)
    assert listed == [[DAMAGED_RUN, OTHER_RUN]] * 3
    kept = [p for p in settings.home.glob("state.damaged-*") if not p.name.endswith(("-wal", "-shm"))]
    assert len(kept) == 1 and kept[0].read_bytes() == garbage


# --- huge inputs (issue 18 item 8) -----------------------------------------------------------
async def test_a_huge_input_comes_back_as_a_short_prefix(settings: Settings) -> None:
    huge = "7" * 1_000_000
    calls = [
        ("rl_edit_config", {"field": "max_count", "value": huge}),
        ("rl_edit_config", {"field": "max_count", "value": [huge]}),
        ("rl_edit_config", {"field": huge, "value": 1}),
        ("rl_edit_config", {"field": "total_steps", "value": huge}),
        ("rl_select_environment", {"name": huge}),
        ("rl_check_status", {"run_id": huge}),
        ("rl_get_results", {"run_id": huge, "include_plot": False}),
        ("rl_stop_training", {"run_id": huge}),
    ]
    async with Client(build_server(settings)) as client:
        for tool, args in calls:
            error, answer, text = await _call(client, tool, args)
            # A refused edit is an answer (applied=false), not an error: Hermes' breaker counts errors.
            refused = tool == "rl_edit_config" and not error and answer and answer.get("applied") is False
            # An unknown id is an exploring agent's answer (found: false), not an error, for the same reason.
            unknown = not error and answer and answer.get("found") is False and len(answer.get("asked") or "") <= 64
            assert (error or refused or unknown) and _clear(text), (tool, text[:200])
            assert len(text) < 1_500, (tool, len(text), text[:200])
        for uri in (f"rl://runs/{huge[:5000]}", f"rl://runs/{huge[:5000]}/config", f"rl://runs/{huge[:5000]}/plot.png"):
            error, text = await _read(client, uri)
            assert error and len(text) < 1_500, (uri, len(text))
