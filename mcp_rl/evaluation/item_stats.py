"""The held-out items' count, answer length and prompt size, for the estimate before a paid
evaluation: `python -m mcp_rl.evaluation.item_stats NAME` ({"config": the run's env config,
"source": its environment reference or null} as JSON on stdin) reports them (its report pipe:
mcp_rl.environments.child).

A child process, because making the items imports the environment module (atroposlib, torch):
the server stays light, and the wait has a deadline.
"""

from __future__ import annotations

import json
import sys
import threading
from typing import Any

from mcp_rl import redact
from mcp_rl.costs.evaluation import ItemStats
from mcp_rl.environments.child import run_child, take_channels, write_report
from mcp_rl.environments.discovery import declared_env_vars
from mcp_rl.errors import UserError
from mcp_rl.runconfig import EnvironmentRef
from mcp_rl.settings import Settings

TIMEOUT_S = 30.0
# The items of an environment config never change: counted once per server process.
_MEASURED: dict[str, ItemStats] = {}
_LOCK = threading.Lock()


def item_stats(environment: str | EnvironmentRef, env_config: dict[str, Any]) -> ItemStats:
    # the environment module (atroposlib, torch): only in this child process
    from mcp_rl.proof.heldout import held_out_set

    items = held_out_set(environment, env_config)
    n = max(1, len(items.items))
    chars = sum(len(m.get("content", "")) for item in items.items for m in item.messages)
    messages = sum(len(item.messages) for item in items.items)
    return ItemStats(
        items=len(items.items),
        max_tokens=items.max_tokens,
        prompt_chars=chars / n,
        messages=messages / n,
        description=items.description,
    )


def measure(
    settings: Settings, source: EnvironmentRef, env_config: dict[str, Any], timeout_s: float = TIMEOUT_S
) -> ItemStats:
    """item_stats in a child process; UserError (in words) when it fails or takes too long."""
    environment = source.name
    payload = json.dumps({"config": env_config, "source": source.model_dump(mode="json")}, default=str)
    key = json.dumps([source.model_dump(mode="json"), env_config], sort_keys=True, default=str)
    with _LOCK:
        if key in _MEASURED:
            return _MEASURED[key]
    done = run_child(
        settings,
        "mcp_rl.evaluation.item_stats",
        [environment],
        env=settings.user_code_env(declared_env_vars(source.file_path, source.class_name)),
        timeout_s=timeout_s,
        what=f"counting {environment}'s held-out items",
        stdin=payload.encode(),
    )
    if done.timed_out:
        raise UserError(
            f"Nothing was started: counting {environment}'s held-out items for the cost estimate took over "
            f"{timeout_s:g} s. Try again (the machine may be busy)."
        )
    try:
        stats = ItemStats.model_validate(done.report) if done.returncode == 0 else None
    except ValueError:
        stats = None
    if stats is None:
        tail = redact.scrub((done.stderr.last_lines(1) or [done.report_error or "no output"])[-1])[:300]
        raise UserError(f"Nothing was started: the held-out items of {environment} could not be counted ({tail}).")
    with _LOCK:
        _MEASURED[key] = stats
    return stats


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    take_channels()  # the report pipe and the lifeline, before the environment is imported
    payload = json.loads(sys.stdin.read() or "{}")
    source = payload.get("source")
    environment = EnvironmentRef.model_validate(source) if source else args[0]
    write_report(item_stats(environment, payload.get("config") or {}).model_dump(mode="json"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
