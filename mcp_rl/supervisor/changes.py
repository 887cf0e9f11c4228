"""What changed in the runs since the last look: the URIs whose content is now different.

The MCP server polls this (lightly: one registry query and a few `stat`s) to tell subscribed
clients when a run's state changes or a training step lands. Runs live in other processes, so
watching their files and the registry is the only way a server sees them change.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mcp_rl.rundir import ENV_METRICS_FILE, METRICS_FILE
from mcp_rl.settings import Settings
from mcp_rl.supervisor.registry import Registry

RUNS_URI = "rl://runs"


def run_uris(run_id: str) -> list[str]:
    """The resources of one run whose content follows its state and metrics."""
    return [f"rl://runs/{run_id}", f"rl://runs/{run_id}/metrics", f"rl://runs/{run_id}/plot.png"]


@dataclass(frozen=True)
class RunSnapshot:
    state: str
    # Sizes of the append-only metrics files: a new step makes them grow.
    metrics_bytes: int
    env_metrics_bytes: int


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


class RunWatch:
    """Snapshots of all runs; `poll()` returns the URIs changed since the previous poll."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._registry: Registry | None = None
        self._last: dict[str, RunSnapshot] | None = None

    def _snapshot(self) -> dict[str, RunSnapshot]:
        if self._registry is None:
            if not self._settings.state_db.exists():
                return {}
            self._registry = Registry(self._settings.state_db)
        out = {}
        previous = self._last or {}
        for run in self._registry.list_runs():
            state = str(run.state)
            old = previous.get(run.run_id)
            if run.active or old is None or old.state != state:
                run_dir = Path(run.run_dir)
                out[run.run_id] = RunSnapshot(state, _size(run_dir / METRICS_FILE), _size(run_dir / ENV_METRICS_FILE))
            else:
                out[run.run_id] = old  # an ended run's files no longer change: no stat needed
        return out

    def poll(self) -> list[str]:
        current = self._snapshot()
        previous, self._last = self._last, current
        if previous is None:
            return []  # the first look only sets the baseline
        changed: dict[str, None] = {}
        for run_id, snap in current.items():
            old = previous.get(run_id)
            if old is None or old.state != snap.state:
                changed[RUNS_URI] = None
                changed.update(dict.fromkeys(run_uris(run_id)))
            elif old != snap:
                changed.update(dict.fromkeys(run_uris(run_id)))
        if set(previous) - set(current):
            changed[RUNS_URI] = None
        return list(changed)
