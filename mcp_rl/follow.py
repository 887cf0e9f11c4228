"""Following a run without re-reading it: log chunks by byte cursor, and waiting for the next
step or a change of state. No MCP types here: the adapter is `mcp_rl.server.follow_tools`."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Literal

import anyio
from pydantic import BaseModel, Field

from mcp_rl.errors import NotFound, UnknownId, clip
from mcp_rl.settings import Settings
from mcp_rl.supervisor import service
from mcp_rl.supervisor.models import RunStatus
from mcp_rl.supervisor.states import LOG_NAMES, TERMINAL_STATES

DEFAULT_CHUNK_BYTES = 16_000
MAX_CHUNK_BYTES = 64_000
WAIT_POLL_S = 1.0

ProgressCallback = Callable[[float, float | None, str], Awaitable[None]]


class LogChunk(BaseModel):
    run_id: str
    process: str
    text: str
    start: int = Field(description="Byte offset of `text` in the log.")
    next_cursor: int = Field(description="Pass as cursor to read what comes next (new lines as they are written).")
    size: int = Field(description="The log's size in bytes now.")
    at_end: bool = Field(description="True when nothing more is written yet.")
    message: str


WaitReason = Literal["step_reached", "state_changed", "ended", "budget_spent"]


class RunWait(BaseModel):
    run_id: str
    reason: WaitReason = Field(
        description="Why the wait returned: the step came, the state changed, the run had ended, or the time ran out."
    )
    waited_s: float
    step: int | None = None
    status: RunStatus = Field(description="The run's full status now, with its latest metrics.")
    message: str


def _log_path(settings: Settings, run_id: str, process: str) -> Path:
    if process not in LOG_NAMES:
        raise NotFound(f"Unknown process {process!r}; logs exist for {', '.join(LOG_NAMES)}.")
    # The folder comes from the registry, never from the id, so no id can walk out of runs/.
    run = service.registry_for(settings).get_run(run_id)
    if run is None:
        raise UnknownId(
            f"Unknown run_id {clip(run_id)}. Call rl_list_runs to see the runs that exist.", "run_id", run_id
        )
    return Path(run.run_dir) / "logs" / f"{process}.log"


def read_log_chunk(
    settings: Settings, run_id: str, process: str, cursor: int | None = None, max_bytes: int = DEFAULT_CHUNK_BYTES
) -> LogChunk:
    """Up to `max_bytes` of a run's log from byte `cursor`, cut at a line end; without a cursor,
    the end of the log. A cursor past the end (the log was replaced) starts again at 0."""
    max_bytes = max(1, min(int(max_bytes), MAX_CHUNK_BYTES))
    path = _log_path(settings, run_id, process)
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return LogChunk(
            run_id=run_id,
            process=process,
            text="",
            start=0,
            next_cursor=0,
            size=0,
            at_end=True,
            message=f"{process}.log does not exist yet (the process has not started); read again with cursor=0.",
        )
    note = ""
    if cursor is None:
        start = max(0, size - max_bytes)
    elif cursor > size:
        start, note = 0, f"The log is shorter than cursor {cursor} (it was replaced); reading from the start. "
    else:
        start = max(0, cursor)
    with open(path, "rb") as fh:
        fh.seek(start)
        data = fh.read(min(max_bytes, size - start))
    if cursor is None and start > 0:
        # Begin at a whole line: drop the partial first one.
        newline = data.find(b"\n")
        if 0 <= newline < len(data) - 1:
            start += newline + 1
            data = data[newline + 1 :]
    end = start + len(data)
    if end < size:
        # End at a whole line unless the chunk holds none (one very long line).
        newline = data.rfind(b"\n")
        if newline >= 0:
            data = data[: newline + 1]
            end = start + len(data)
    at_end = end >= size
    skipped = (
        f"{start} earlier bytes not shown (cursor=0 reads from the start). " if cursor is None and start > 0 else ""
    )
    more = (
        "Nothing more yet; call again with cursor=next_cursor for new lines."
        if at_end
        else f"{size - end} more bytes: call again with cursor=next_cursor."
    )
    return LogChunk(
        run_id=run_id,
        process=process,
        text=data.decode("utf-8", errors="replace"),
        start=start,
        next_cursor=end,
        size=size,
        at_end=at_end,
        message=note + skipped + more,
    )


async def wait_for_run(
    settings: Settings,
    run_id: str,
    until_step: int | None,
    timeout_s: float,
    on_progress: ProgressCallback | None = None,
    poll_s: float = WAIT_POLL_S,
) -> RunWait:
    """Wait until the run reaches `until_step` (default: the step after the current one),
    changes state, or `timeout_s` passes; then answer with its full status."""
    started = time.monotonic()
    first = await anyio.to_thread.run_sync(service.run_status, settings, run_id, False)
    first_step = first.metrics.step if first.metrics else None
    target = until_step if until_step is not None else (first_step or 0) + 1
    status = first
    reason: WaitReason | None = None
    reported = -1.0
    while True:
        step = status.metrics.step if status.metrics else None
        if status.status in TERMINAL_STATES:
            reason = "ended" if status is first else "state_changed"
        elif status.status != first.status:
            reason = "state_changed"
        elif step is not None and step >= target:
            reason = "step_reached"
        if on_progress is not None and step is not None and step > reported:
            reported = float(step)
            total = status.metrics.num_steps if status.metrics else None
            await on_progress(
                float(step), float(total) if total else None, f"run {run_id}: step {step}, {status.status}"
            )
        if reason is not None or time.monotonic() - started >= timeout_s:
            break
        await anyio.sleep(min(poll_s, max(0.0, timeout_s - (time.monotonic() - started))))
        status = await anyio.to_thread.run_sync(service.run_status, settings, run_id, False)
    reason = reason or "budget_spent"
    step = status.metrics.step if status.metrics else None
    waited = round(time.monotonic() - started, 1)
    headline = f"Run {run_id} is {status.status} at step {step if step is not None else '-'}"
    if status.metrics and status.metrics.reward_mean is not None:
        headline += f", reward mean {status.metrics.reward_mean:.4g}"
    messages = {
        "step_reached": f"{headline}: step {target} reached after {waited} s.",
        "state_changed": f"{headline}: the state changed from {first.status} after {waited} s.",
        "ended": f"{headline}: it had already ended. Use rl_get_results('{run_id}').",
        "budget_spent": f"{headline}: no change within {waited} s. Call rl_wait_for_run again to keep waiting.",
    }
    return RunWait(run_id=run_id, reason=reason, waited_s=waited, step=step, status=status, message=messages[reason])
