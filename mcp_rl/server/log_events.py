"""Run and smoke-test events as MCP log messages (`notifications/message`), for the host's log.

The server declares the `logging` capability by handling `logging/setLevel`; a 2025-11-25 client
that sets a level is sent, from then on, every event at or above it: a run started (info), completed
(notice), stopped (notice), failed with its cause (error), stopped at its cost cap (warning), and a
smoke test finished (info; warning when it failed). The events come from the server's own look at
the registry and the tests folder every `watch_interval_s`, so they cover runs started by any
server. 2026-07-28 clients get log messages only within a request they opted in on (SEP-2577), so
for them the resource notifications (`subscriptions/listen`) are the way to follow runs.

`EventWatch` (no MCP types) finds the events; `LogSessions` sends them.
"""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass
from typing import Any

import anyio
from mcp.server import ServerRequestContext
from mcp.shared.exceptions import MCPDeprecationWarning
from mcp.types import EmptyResult, LoggingLevel, SetLevelRequestParams

from mcp_rl.inference_test.models import SPEC_FILE, SUMMARY_FILE, InferenceTestResult
from mcp_rl.server.rl_server import RlServer, client_of
from mcp_rl.server.state import AppState
from mcp_rl.settings import Settings
from mcp_rl.supervisor.registry import Registry
from mcp_rl.supervisor.states import RunState

log = logging.getLogger(__name__)

LOGGER_NAME = "mcp-rl"
# RFC 5424 severities as MCP names them, least severe first.
LEVELS: tuple[LoggingLevel, ...] = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")


@dataclass(frozen=True)
class Event:
    level: LoggingLevel
    text: str
    data: dict[str, Any]


def _run_event(run_id: str, state: RunState, cause: str | None, environment: str) -> Event | None:
    data: dict[str, Any] = {"event": f"run_{state.value}", "run_id": run_id, "environment": environment}
    if cause:
        data["cause"] = cause
    if state == RunState.RUNNING:
        return Event("info", f"Run {run_id} ({environment}) started: all its processes are up.", data)
    if state == RunState.COMPLETED:
        return Event("notice", f"Run {run_id} ({environment}) completed: {cause or 'done'}. Use rl_get_results.", data)
    if state == RunState.FAILED:
        return Event("error", f"Run {run_id} ({environment}) failed: {cause or 'no cause recorded'}.", data)
    if state == RunState.STOPPED:
        if cause and "cost cap" in cause:
            data["event"] = "run_cost_cap_reached"
            return Event("warning", f"Run {run_id} ({environment}) stopped at its cost cap: {cause}.", data)
        return Event("notice", f"Run {run_id} ({environment}) stopped: {cause or 'on request'}.", data)
    return None


def _test_event(result: InferenceTestResult) -> Event:
    summary = result.summary
    data: dict[str, Any] = {
        "event": f"smoke_test_{result.state}",
        "test_id": result.test_id,
        "environment": result.environment,
        "best_model": summary.best_model,
        "environment_working": summary.environment_working,
    }
    text = f"Smoke test {result.test_id} ({result.environment}) {result.state}"
    if summary.best_model:
        text += f"; highest on its training prompts (sampled): {summary.best_model}"
    if summary.environment_working is not None:
        text += f"; environment working: {'yes' if summary.environment_working else 'no'}"
    text += f". rl_get_test_result('{result.test_id}') has the details."
    return Event("info" if result.state == "completed" else "warning", text, data)


class EventWatch:
    """What ended or started since the last look. The first look only takes the baseline."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._runs: dict[str, RunState] | None = None
        self._seen_tests: set[str] | None = None
        self._running_tests: set[str] = set()

    def poll(self) -> list[Event]:
        return self._poll_runs() + self._poll_tests()

    def _poll_runs(self) -> list[Event]:
        if not self._settings.state_db.exists():
            return []
        records = Registry(self._settings.state_db).list_runs()
        now = {r.run_id: r.state for r in records}
        previous, self._runs = self._runs, now
        if previous is None:
            return []
        events = []
        for record in reversed(records):  # oldest first
            before = previous.get(record.run_id)
            if before == record.state:
                continue
            if before is None and record.state == RunState.STARTING:
                continue  # a new run: its start is told when it is running
            event = _run_event(record.run_id, record.state, record.cause, record.environment)
            if event is not None:
                events.append(event)
        return events

    def _poll_tests(self) -> list[Event]:
        folder = self._settings.tests_dir
        names = {t.name for t in folder.iterdir() if (t / SPEC_FILE).is_file()} if folder.is_dir() else set()
        first = self._seen_tests is None
        # Read only what can have changed: tests running at the last look, and new ones.
        to_read = names if first else (self._running_tests | (names - (self._seen_tests or set())))
        running: set[str] = set()
        ended: list[InferenceTestResult] = []
        for name in sorted(to_read & names):
            try:
                result = InferenceTestResult.load(folder / name / SUMMARY_FILE)
            except (OSError, ValueError):
                running.add(name)  # half-written: look again next time
                continue
            if result.state == "running":
                running.add(name)
            elif not first:
                ended.append(result)  # was running, or started and ended between two looks
        self._seen_tests, self._running_tests = names, running
        return [_test_event(r) for r in ended]


class LogSessions:
    """The sessions that set a log level (`logging/setLevel`), with that level."""

    def __init__(self) -> None:
        self._sessions: list[tuple[Any, Any, LoggingLevel]] = []

    def set(self, session: Any, level: LoggingLevel) -> None:
        client = client_of(session)
        self._sessions = [(c, s, lv) for c, s, lv in self._sessions if c is not client]
        self._sessions.append((client, session, level))

    def __bool__(self) -> bool:
        return bool(self._sessions)

    async def send(self, event: Event) -> None:
        rank = LEVELS.index(event.level)
        for client, session, level in list(self._sessions):
            if rank < LEVELS.index(level):
                continue
            try:
                with warnings.catch_warnings():
                    # Deprecated for 2026-07-28 (SEP-2577); current for the 2025-11-25 sessions here.
                    warnings.simplefilter("ignore", MCPDeprecationWarning)
                    await session.send_log_message(event.level, {"message": event.text, **event.data}, LOGGER_NAME)
            except Exception as exc:  # a closed session: forget it, keep telling the others
                log.debug("dropping a log session: %r", exc)
                self._sessions = [e for e in self._sessions if e[0] is not client]


def register(mcp: RlServer, state: AppState) -> None:
    """Handle `logging/setLevel` (which declares the `logging` capability) and tell the sessions
    that set a level about run and test events, for the server's lifetime."""
    sessions = LogSessions()
    settings = state.settings

    async def on_set_level(ctx: ServerRequestContext[Any], params: SetLevelRequestParams) -> EmptyResult:
        sessions.set(ctx.session, params.level)
        return EmptyResult()

    # Routed since the server was built (RlServer.LATE_METHODS; deprecated in 2026-07-28).
    mcp.set_request_handler("logging/setLevel", on_set_level)

    watch = EventWatch(settings)

    async def take_baseline() -> None:
        # Before the server answers anything: an event that happens after a client connected is
        # then always told, however late the watch task gets its first turn on a busy machine.
        try:
            await anyio.to_thread.run_sync(watch.poll)
        except Exception as exc:  # the watch takes its baseline on its first poll instead
            log.debug("event watch baseline failed: %r", exc)

    async def watch_events() -> None:
        while True:
            try:
                events = await anyio.to_thread.run_sync(watch.poll)
            except Exception as exc:  # a locked or half-created state.db: try again next time
                log.debug("event watch failed: %r", exc)
                events = []
            for event in events:
                log.log(_PY_LEVELS.get(event.level, logging.WARNING), "%s", event.text)  # stderr too, as before
                if sessions:
                    await sessions.send(event)
            await anyio.sleep(settings.watch_interval_s)

    state.startup_hooks.append(take_baseline)
    state.background_tasks.append(watch_events)


_PY_LEVELS = {"info": logging.INFO, "notice": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}
