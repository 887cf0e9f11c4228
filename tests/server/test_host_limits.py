"""What real hosts need, in memory: strict inputs on every tool, idempotent starts, config
revisions, a bounded answer for a slow select, paged lists, log cursors, waiting on a run, and
rate-limited checks that still carry the numbers."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import anyio
import pytest
from mcp import Client

from mcp_rl.server import build_server
from mcp_rl.settings import Settings
from mcp_rl.supervisor import service, start
from mcp_rl.supervisor.states import RunState
from tests.conftest import FIXTURES, make_env
from tests.kit.runs import run_record

pytestmark = pytest.mark.anyio
GOOD = str(FIXTURES / "envs" / "good")
SLOW = str(FIXTURES / "envs" / "slow")

# Arguments each tool needs besides the unknown one, so only the unknown one is wrong.
REQUIRED = {
    "rl_select_environment": {"name": "counting"},
    "rl_edit_config": {"field": "max_count", "value": 3},
    "rl_check_status": {"run_id": "abc12345"},
    "rl_stop_training": {"run_id": "abc12345"},
    "rl_get_results": {"run_id": "abc12345"},
    "rl_read_log": {"run_id": "abc12345"},
    "rl_wait_for_run": {"run_id": "abc12345"},
    "rl_get_test_result": {"test_id": "20990101-000000-abcdef"},
    "rl_cancel_test": {"test_id": "20990101-000000-abcdef"},
}


def append(path: Path, text: str) -> None:
    with open(path, "a") as fh:
        fh.write(text)


def _settings(home: Path, **extra: str) -> Settings:
    return Settings.from_env(make_env(home, MCP_RL_ENV_PATHS=GOOD, **extra))


def _record_run(
    settings: Settings,
    run_id: str,
    state: RunState = RunState.COMPLETED,
    steps: int = 3,
    created_at: float | None = None,
) -> Path:
    registry = service.registry_for(settings)
    run_dir = settings.runs_dir / run_id
    (run_dir / "logs").mkdir(parents=True)
    (run_dir / "run.yaml").write_text(f"run_id: {run_id}\n")
    (run_dir / "metrics.jsonl").write_text(
        "".join(
            json.dumps({"step": s, "reward/mean": s / 10, "train/loss": 1 / s, "pad": "x" * 50}) + "\n"
            for s in range(1, steps + 1)
        )
    )
    registry.create_run(run_record(run_id, run_dir, environment="counting", created_at=created_at))
    if state != RunState.STARTING:
        registry.transition(run_id, RunState.RUNNING, "all processes ready")
    if state == RunState.COMPLETED:
        registry.transition(run_id, RunState.COMPLETED, f"trainer finished step {steps}")
    return run_dir


async def test_every_tool_refuses_unknown_arguments_naming_the_valid_ones(home: Path) -> None:
    async with Client(build_server(_settings(home))) as client:
        tools = (await client.list_tools()).tools
        assert len(tools) >= 15
        for tool in tools:
            assert tool.input_schema.get("additionalProperties") is False, tool.name
            assert tool.title, tool.name
            args = {**REQUIRED.get(tool.name, {}), "bogus_argument": 1}
            result = await client.call_tool(tool.name, args)
            text = result.content[0].text
            assert result.is_error, tool.name
            assert "does not take bogus_argument" in text and "Valid parameters:" in text, text
            for param in tool.input_schema.get("properties", {}):
                assert param in text, (tool.name, param, text)
    assert not (home / "runs").exists() or not any((home / "runs").iterdir())
    assert not (home / "tests").exists() or not any((home / "tests").iterdir())


async def test_misplaced_arguments_say_where_they_belong_and_nothing_runs(home: Path) -> None:
    async with Client(build_server(_settings(home))) as client:
        start = await client.call_tool("rl_start_training", {"environment": "gsm8k", "total_steps": 10})
        smoke = await client.call_tool("rl_test_inference", {"prompts": ["What is 2+2?"]})
        edit = await client.call_tool("rl_edit_config", {"field": "max_count", "value": 3, "steps": 5})
    text = start.content[0].text
    assert start.is_error and "rl_edit_config('total_steps', 10)" in text and "rl_select_environment('gsm8k')" in text
    assert "Valid parameters: idempotency_key, expected_revision" in text
    assert smoke.is_error and "takes no prompts" in smoke.content[0].text
    assert edit.is_error and "rl_edit_config('total_steps', 5)" in edit.content[0].text
    assert not (home / "tests").exists() or not any((home / "tests").iterdir())


async def test_gemini_wait_for_previous_is_accepted_and_ignored_strictness_stays(home: Path) -> None:
    # Gemini CLI adds `wait_for_previous` to every tool and forwards it: a dependent pair as it sends it.
    async with Client(build_server(_settings(home))) as client:
        listed = await client.call_tool("rl_list_environments", {"wait_for_previous": False})
        chosen = await client.call_tool("rl_select_environment", {"name": "counting", "wait_for_previous": True})
        config = await client.call_tool("rl_get_current_config", {"wait_for_previous": True})
        both = await client.call_tool("rl_list_runs", {"wait_for_previous": True, "bogus_argument": 1})
    assert not listed.is_error and not chosen.is_error, (listed.content, chosen.content)
    assert not config.is_error and config.structured_content["environment"] == "counting", config.content
    text = both.content[0].text
    assert both.is_error and "does not take bogus_argument." in text and "wait_for_previous" not in text, text


@pytest.fixture
def no_launch(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Everything of rl_start_training except spawning the supervisor (that is the e2e tier's)."""
    launched: list[str] = []
    monkeypatch.setattr(
        start, "_launch_supervisor", lambda settings, registry, run_id, run_dir: launched.append(run_id)
    )
    return launched


async def test_same_idempotency_key_returns_the_first_run(home: Path, no_launch: list[str]) -> None:
    async with Client(build_server(_settings(home))) as client:
        assert not (await client.call_tool("rl_select_environment", {"name": "counting"})).is_error
        first = await client.call_tool("rl_start_training", {"idempotency_key": "k-1"})
        assert not first.is_error, first.content[0].text
        again = await client.call_tool("rl_start_training", {"idempotency_key": "k-1"})
        # Another run beside the first (no supervisor runs here: the first stays `starting`).
        other = await client.call_tool("rl_start_training", {"idempotency_key": "k-2", "allow_concurrent": True})
        # A retry while the first call is still in flight (the host gave up on it) starts nothing new.
        racing: list[str] = []

        async def start_k3() -> None:
            racing.append(
                (
                    await client.call_tool("rl_start_training", {"idempotency_key": "k-3", "allow_concurrent": True})
                ).structured_content["run_id"]
            )

        async with anyio.create_task_group() as tasks:
            for _ in range(3):
                tasks.start_soon(start_k3)
    a, b, c = first.structured_content, again.structured_content, other.structured_content
    assert a["reused"] is False and b["reused"] is True and b["run_id"] == a["run_id"]
    assert "no new run" in b["message"]
    assert c["run_id"] != a["run_id"]
    assert len(set(racing)) == 1 and len(racing) == 3
    assert no_launch == [a["run_id"], c["run_id"], racing[0]]
    # The answer says exactly what it trains.
    assert a["environment"] == "counting" and a["trainer"]["num_steps"] == a["num_steps"]
    assert "Training counting" in a["message"] and a["revision"] in a["message"]


async def test_a_stale_revision_is_refused_and_nothing_starts(home: Path, no_launch: list[str]) -> None:
    async with Client(build_server(_settings(home))) as client:
        selected = (await client.call_tool("rl_select_environment", {"name": "counting"})).structured_content
        first = (await client.call_tool("rl_edit_config", {"field": "max_count", "value": 30})).structured_content
        assert first["revision"] != selected["revision"]
        # Another client edits the config in between.
        second = (await client.call_tool("rl_edit_config", {"field": "total_steps", "value": 7})).structured_content
        stale = await client.call_tool("rl_start_training", {"expected_revision": first["revision"]})
        current = (await client.call_tool("rl_get_current_config", {})).structured_content
        fresh = await client.call_tool("rl_start_training", {"expected_revision": second["revision"]})
    # A refusal the agent acts on: an answer (started=false), not an error.
    assert not stale.is_error and stale.structured_content["started"] is False
    assert f"now {second['revision']!r}" in stale.structured_content["refused"]
    assert "Nothing was started" in stale.content[0].text and stale.structured_content["revision"] == second["revision"]
    assert current["revision"] == second["revision"]
    assert not fresh.is_error and fresh.structured_content["num_steps"] == 7
    assert len(no_launch) == 1


async def test_a_slow_import_answers_within_the_budget_and_the_next_select_collects_it(home: Path) -> None:
    settings = Settings.from_env(make_env(home, MCP_RL_ENV_PATHS=SLOW, MCP_RL_TOOL_TIME_BUDGET="1", SLOW_IMPORT_S="4"))
    progress: list[tuple[float, float | None, str | None]] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append((value, total, message))

    async with Client(build_server(settings)) as client:
        started = time.monotonic()
        first = await client.call_tool("rl_select_environment", {"name": "slow_import"}, progress_callback=on_progress)
        took = time.monotonic() - started
        assert not first.is_error, first.content[0].text
        # Answered at the 1 s budget, long before the 4 s import ended (slack for a loaded machine).
        assert first.structured_content["status"] == "loading" and took < 3, took
        assert "call rl_select_environment('slow_import') again" in first.structured_content["message"]
        assert progress and "importing slow_import" in progress[0][2]
        deadline = time.monotonic() + 30
        while True:
            again = (await client.call_tool("rl_select_environment", {"name": "slow_import"})).structured_content
            if again["status"] == "selected" or time.monotonic() > deadline:
                break
        assert again["status"] == "selected" and again["config_source"] == "config_init"


async def test_rate_limited_checks_still_carry_step_reward_and_loss_and_ended_runs_are_never_limited(
    home: Path,
) -> None:
    settings = _settings(home, MCP_RL_STATUS_MIN_INTERVAL="1800")
    _record_run(settings, "abc12345", state=RunState.RUNNING)  # within its launch window: not dead
    _record_run(settings, "done1234")
    async with Client(build_server(settings)) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        full = (await client.call_tool("rl_check_status", {"run_id": "abc12345"})).structured_content
        short = (await client.call_tool("rl_check_status", {"run_id": "abc12345"})).structured_content
        ended = [
            (await client.call_tool("rl_check_status", {"run_id": "done1234"})).structured_content for _ in range(3)
        ]
    assert not full["rate_limited"] and full["metrics"]["latest"]
    assert short["rate_limited"] and short["metrics"]["step"] == 3
    assert short["metrics"]["reward_mean"] == pytest.approx(0.3) and short["metrics"]["loss"] == pytest.approx(1 / 3)
    assert short["metrics"]["latest"] == {}
    # No planned step count known: the start-up interval (60 s), not the 30 min ceiling.
    assert 0 < short["next_check_in_seconds"] <= 60 and "Training takes hours" not in short["message"]
    assert all(not e["rate_limited"] and e["status"] == "completed" and e["metrics"]["latest"] for e in ended)
    check = tools["rl_check_status"]
    assert check.annotations.read_only_hint is True
    assert "reads as failed" in check.description


async def test_runs_are_listed_a_page_at_a_time(home: Path) -> None:
    settings = _settings(home)
    for i in range(5):
        _record_run(settings, f"run{i}", created_at=time.time() - 100 + i)
    async with Client(build_server(settings)) as client:
        first = (await client.call_tool("rl_list_runs", {"limit": 2})).structured_content
        last = (await client.call_tool("rl_list_runs", {"offset": 4, "limit": 2})).structured_content
    assert [r["run_id"] for r in first["runs"]] == ["run4", "run3"]
    assert first["total"] == 5 and first["next_offset"] == 2
    assert [r["run_id"] for r in last["runs"]] == ["run0"] and last["next_offset"] is None


async def test_a_log_is_followed_by_cursor_without_rereading(home: Path) -> None:
    settings = _settings(home)
    log = _record_run(settings, "abc12345") / "logs" / "trainer.log"
    log.write_text("".join(f"line {i:04d}\n" for i in range(1000)))  # 10 bytes a line
    async with Client(build_server(settings)) as client:
        tail = (await client.call_tool("rl_read_log", {"run_id": "abc12345", "max_bytes": 95})).structured_content
        head = (
            await client.call_tool("rl_read_log", {"run_id": "abc12345", "cursor": 0, "max_bytes": 25})
        ).structured_content
        nxt = (
            await client.call_tool(
                "rl_read_log", {"run_id": "abc12345", "cursor": head["next_cursor"], "max_bytes": 25}
            )
        ).structured_content
        append(log, "new line\n")
        new = (
            await client.call_tool("rl_read_log", {"run_id": "abc12345", "cursor": tail["next_cursor"]})
        ).structured_content
        bad = await client.call_tool("rl_read_log", {"run_id": "abc12345", "process": "../../state.db"})
    assert tail["text"].splitlines() == [f"line {i:04d}" for i in range(991, 1000)] and tail["at_end"]
    assert "earlier bytes not shown" in tail["message"]
    assert head["text"] == "line 0000\nline 0001\n" and not head["at_end"] and "more bytes" in head["message"]
    assert nxt["text"] == "line 0002\nline 0003\n"
    assert new["text"] == "new line\n" and new["at_end"]
    assert bad.is_error and "api, trainer, env, supervisor" in bad.content[0].text


async def test_wait_returns_at_the_step_or_when_the_time_is_up(home: Path) -> None:
    settings = _settings(home)
    run_dir = _record_run(settings, "abc12345", state=RunState.RUNNING, steps=1)
    _record_run(settings, "done1234")

    def write_steps() -> None:
        for step in (2, 3):
            time.sleep(0.3)  # a trainer logging a step now and then
            with open(run_dir / "metrics.jsonl", "a") as fh:
                fh.write(json.dumps({"step": step, "reward/mean": 0.5, "train/loss": 0.1}) + "\n")

    async with Client(build_server(settings)) as client:
        writer = threading.Thread(target=write_steps)
        writer.start()
        reached = (
            await client.call_tool("rl_wait_for_run", {"run_id": "abc12345", "until_step": 3})
        ).structured_content
        writer.join()
        started = time.monotonic()
        idle = (await client.call_tool("rl_wait_for_run", {"run_id": "abc12345", "timeout_s": 0.5})).structured_content
        idle_s = time.monotonic() - started
        ended = (await client.call_tool("rl_wait_for_run", {"run_id": "done1234"})).structured_content
    assert reached["reason"] == "step_reached" and reached["step"] == 3
    assert reached["status"]["metrics"]["reward_mean"] == 0.5
    assert idle["reason"] == "budget_spent" and 0.4 < idle_s < 10
    assert ended["reason"] == "ended" and "rl_get_results" in ended["message"]


async def test_smoke_test_tools_answer_unknown_ids_and_list_nothing(home: Path) -> None:
    async with Client(build_server(_settings(home))) as client:
        listing = (await client.call_tool("rl_list_tests", {})).structured_content
        unknown = await client.call_tool("rl_get_test_result", {"test_id": "20990101-000000-abcdef"})
        cancel = await client.call_tool("rl_cancel_test", {"test_id": "../etc"})
    assert listing["count"] == 0 and listing["tests"] == []
    # Answers, not errors (server/exploring.py): an exploring agent's guesses do not trip a host's breaker.
    assert not unknown.is_error and "Unknown test_id" in unknown.content[0].text
    assert not cancel.is_error and "Unknown test_id" in cancel.content[0].text
    assert unknown.structured_content["found"] is False and unknown.structured_content["known"] == []


async def test_log_and_metrics_answers_are_byte_capped_and_say_how_to_get_more(home: Path) -> None:
    from mcp_rl.supervisor.bounded import LATEST_MAX_BYTES, RESOURCE_MAX_BYTES

    settings = _settings(home)
    run_dir = _record_run(settings, "abc12345")
    (run_dir / "logs" / "trainer.log").write_text("".join(f"{i:05d} " + "x" * 94 + "\n" for i in range(5000)))
    wide = {"step": 4, "reward/mean": 0.4, "train/loss": 0.2, **{f"env/metric_{i}": "y" * 40 for i in range(300)}}
    append(run_dir / "metrics.jsonl", (json.dumps(wide) + "\n") * 100)
    async with Client(build_server(settings)) as client:
        log = (await client.read_resource("rl://runs/abc12345/logs/trainer?tail=5000")).contents[0].text
        metrics = (await client.read_resource("rl://runs/abc12345/metrics")).contents[0].text
        status = (await client.call_tool("rl_check_status", {"run_id": "abc12345"})).structured_content
    assert len(log.encode()) <= RESOURCE_MAX_BYTES + 200 and "rl_read_log('abc12345', 'trainer', cursor=0)" in log
    assert log.splitlines()[1].startswith("0") and log.splitlines()[-1].startswith("04999")
    data = json.loads(metrics)
    assert len(metrics.encode()) <= RESOURCE_MAX_BYTES and "older rows left out" in data["note"]
    assert data["rows"][-1]["step"] == 4
    latest = status["metrics"]["latest"]
    assert len(json.dumps(latest)) <= LATEST_MAX_BYTES + 200 and "more keys" in latest["_more"]
    assert status["metrics"]["step"] == 4 and status["metrics"]["reward_mean"] == 0.4


async def test_a_stop_past_the_budget_answers_in_progress_and_the_next_call_collects_it(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.server.stand_ins import stand_in_run

    monkeypatch.setenv("MCP_RL_TRAINER_STOP_GRACE", "5")  # the trainer ignores SIGTERM for all of it
    monkeypatch.setenv("MCP_RL_STOP_GRACE", "1")
    settings = _settings(home, MCP_RL_TOOL_TIME_BUDGET="1.5")
    popens = stand_in_run(settings, "stop1234")
    try:
        async with Client(build_server(settings)) as client:
            started = time.monotonic()
            first = (await client.call_tool("rl_stop_training", {"run_id": "stop1234"})).structured_content
            took = time.monotonic() - started
            deadline = time.monotonic() + 30
            while True:
                last = (await client.call_tool("rl_stop_training", {"run_id": "stop1234"})).structured_content
                if not last["in_progress"] or time.monotonic() > deadline:
                    break
    finally:
        for popen in popens:
            if popen.poll() is None:
                popen.kill()
    # The 1.5 s budget, not the trainer's 5 s grace (slack for a loaded machine).
    assert first["in_progress"] is True and first["status"] == "stopping" and took < 4, (first, took)
    assert "rl_stop_training(run_id) again" in first["message"]
    assert first["was_running"] is True
    assert last["status"] == "stopped" and last["in_progress"] is False and last["processes_left"] == []
