"""A server's upkeep of the runs: at start-up, reconcile the registry with what still runs; then,
every watch interval, record the end of runs whose supervisor died and have a detached stopper
end their leftovers. The status tools only read (a dead run reads as failed), so this is what
writes it down, within a watch interval of the death."""

from __future__ import annotations

import logging
import threading

import anyio

from mcp_rl.settings import Settings
from mcp_rl.supervisor.reconcile import reconcile, repair_dead_runs

log = logging.getLogger(__name__)


def reconcile_in_background(settings: Settings) -> None:
    """Reconcile on a daemon thread: ending a dead run's leftover processes can take a grace
    period, and start-up must stay fast."""

    def work() -> None:
        try:
            reconcile(settings)
        except Exception:
            log.exception("reconciling runs failed")

    threading.Thread(target=work, name="reconcile-runs", daemon=True).start()


async def repair_dead_runs_forever(settings: Settings) -> None:
    """Record dead runs as ended, every `settings.watch_interval_s`, until cancelled."""
    while True:
        try:
            repaired = await anyio.to_thread.run_sync(lambda: repair_dead_runs(settings))
            if repaired:
                log.warning("runs whose supervisor died were recorded as ended: %s", ", ".join(repaired))
        except Exception as exc:  # a locked or half-created state.db: try again next time
            log.debug("repairing dead runs failed: %r", exc)
        await anyio.sleep(settings.watch_interval_s)
