"""Run answers cut to a size an agent can afford: a status's latest metrics line, a log's tail and
the metrics rows, each saying where the rest is. An agent pays for every byte, and Claude Code
truncates long answers."""

from __future__ import annotations

import json
from typing import Any

from mcp_rl.supervisor.models import RunStatus

RESOURCE_MAX_BYTES = 64_000
LATEST_MAX_BYTES = 4_000


def bounded_latest(status: RunStatus) -> RunStatus:
    """The status with its full metrics line cut to LATEST_MAX_BYTES, saying where the rest is."""
    if status.metrics is None or len(json.dumps(status.metrics.latest, default=str)) <= LATEST_MAX_BYTES:
        return status
    kept: dict[str, Any] = {}
    size = 0
    for key, value in status.metrics.latest.items():
        size += len(json.dumps({key: value}, default=str))
        if size > LATEST_MAX_BYTES:
            break
        kept[key] = value
    left = len(status.metrics.latest) - len(kept)
    kept["_more"] = f"{left} more keys: rl_get_results('{status.run_id}') or rl://runs/{status.run_id}/metrics"
    return status.model_copy(update={"metrics": status.metrics.model_copy(update={"latest": kept})})


def bounded_log(text: str, run_id: str, process: str) -> str:
    """A log answer cut to its last RESOURCE_MAX_BYTES, at a line start, saying how to read more."""
    data = text.encode()
    if len(data) <= RESOURCE_MAX_BYTES:
        return text
    tail = data[-RESOURCE_MAX_BYTES:]
    tail = tail[tail.find(b"\n") + 1 :]
    return (
        f"[cut to the last {len(tail)} bytes; rl_read_log('{run_id}', '{process}', cursor=0) pages through the "
        f"whole log]\n" + tail.decode("utf-8", errors="replace")
    )


def bounded_metrics(data: dict[str, Any]) -> str:
    """The metrics answer within RESOURCE_MAX_BYTES: the oldest rows go first, and it says so."""
    text = json.dumps(data, indent=1)
    rows = list(data.get("rows", []))
    dropped = 0
    while len(text.encode()) > RESOURCE_MAX_BYTES and rows:
        cut = max(1, len(rows) // 4)
        rows, dropped = rows[cut:], dropped + cut
        text = json.dumps(
            {
                **data,
                "rows": rows,
                "count": len(rows),
                "note": f"{dropped} older rows left out to stay under {RESOURCE_MAX_BYTES} bytes; rl_get_results "
                "summarises the whole run and metrics.jsonl in the run folder has every step.",
            },
            indent=1,
        )
    return text
