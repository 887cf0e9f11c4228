"""What Tinker's own billing API says a run used, shown beside mcp-rl's estimates.

Tinker exposes billed usage (tinker SDK 0.38: `AdminClient.get_billing_usage(starting_on,
ending_before)`, GET /api/v1/billing/usage/events): hourly buckets per session with token counts
by kind (training, sampling prefill, cached or not, sampling sample) and `estimated_cost_usd`, a
gross cost before credits (invoice-reconciled for completed UTC days, Tinker's rate card for the
current day; not an amount due). It needs the admin or billing-admin role in the organisation and
lags real time by up to a few hours. Sessions carry the `user_metadata` they were created with:
mcp-rl's Tinker sessions are created with {"mcp_rl_run_id": <run id>}, so a run's usage is the
events of the sessions that name it.

Any failure (no role, an old server, the network) is a note in words, never an error of the tool
that shows it; the estimates stand on their own.
"""

from __future__ import annotations

import math
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import BaseModel, Field

from mcp_rl.settings import Settings

RUN_METADATA_KEY = "mcp_rl_run_id"
TIMEOUT_S = 10.0
MAX_WINDOW = timedelta(days=14)  # the API's longest window


class BilledUsage(BaseModel):
    label: str = Field(
        "Tinker billing API",
        description="From Tinker's billing API: gross usage cost before credits and commits, not an invoice amount.",
    )
    usd: float | None = Field(None, description="Sum of the priced events' estimated_cost_usd (None: none priced).")
    unpriced_events: int = Field(0, description="Events Tinker has not priced yet (or never prices: checkpoints).")
    training_tokens: int = 0
    prefill_tokens: int = 0
    cached_prefill_tokens: int = 0
    sampled_tokens: int = 0
    sessions: int = Field(0, description="Tinker sessions of this run found in the window.")
    window: str = ""
    summary: str = ""


def run_window(started_at: float, ended_at: float | None) -> tuple[datetime, datetime]:
    """Hour-aligned [start, end) around the run (the API takes hour boundaries, 14 days at most)."""
    start = datetime.fromtimestamp(started_at, UTC).replace(minute=0, second=0, microsecond=0)
    last = datetime.fromtimestamp(ended_at if ended_at is not None else time.time(), UTC)
    end = last.replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
    now_hour = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
    end = min(end, now_hour)
    if end - start > MAX_WINDOW:
        start = end - MAX_WINDOW  # the latest 14 days of a longer run
    return start, end


def summarise(response: Any, run_id: str, window: str) -> BilledUsage:
    """The events of the sessions created for `run_id` in a BillingUsageResponse."""
    sessions = {
        sid
        for sid, info in (getattr(response, "sessions", None) or {}).items()
        if (getattr(info, "user_metadata", None) or {}).get(RUN_METADATA_KEY) == run_id
    }
    usage = BilledUsage(sessions=len(sessions), window=window)
    priced: list[float] = []
    for event in getattr(response, "data", None) or []:
        if event.session_id not in sessions:
            continue
        info = event.event_info
        kind = getattr(info, "type", "")
        count = int(getattr(info, "token_count", 0) or 0)
        if kind == "training":
            usage.training_tokens += count
        elif kind == "sampling_prefill":
            if getattr(info, "cached", False):
                usage.cached_prefill_tokens += count
            else:
                usage.prefill_tokens += count
        elif kind == "sampling_sample":
            usage.sampled_tokens += count
        cost = event.estimated_cost_usd
        if isinstance(cost, int | float) and math.isfinite(cost):
            priced.append(float(cost))
        else:
            usage.unpriced_events += 1
    usage.usd = sum(priced) if priced else None
    tokens = (
        f"{usage.training_tokens:,} trained, {usage.prefill_tokens + usage.cached_prefill_tokens:,} prefilled "
        f"({usage.cached_prefill_tokens:,} cached), {usage.sampled_tokens:,} sampled tokens"
    )
    if not sessions:
        usage.summary = (
            f"Tinker's billing API lists no usage of this run yet ({window}; it lags real time by up to a few hours)."
        )
    else:
        amount = f"${usage.usd:.6f}" if usage.usd is not None else "not priced yet"
        unpriced = f", {usage.unpriced_events} event(s) not priced yet" if usage.unpriced_events else ""
        usage.summary = (
            f"Tinker's billing API: {amount} ({tokens}{unpriced}; gross before credits, not an invoice; it lags real "
            "time by up to a few hours)."
        )
    return usage


def billed_for_run(
    settings: Settings, run_id: str, started_at: float, ended_at: float | None
) -> tuple[BilledUsage | None, str | None]:
    """The run's billed usage, or why it could not be read (in words)."""
    key = settings.tinker_api_key
    if key is None:
        return None, "Tinker's billed usage was not read: TINKER_API_KEY is not set in the server's environment."
    start, end = run_window(started_at, ended_at)
    window = f"{start:%Y-%m-%d %H:00} to {end:%Y-%m-%d %H:00} UTC"
    try:
        # the Tinker SDK: only when a Tinker run's results are read
        import tinker

        admin = tinker.AdminClient(api_key=key.get_secret_value(), base_url=settings.tinker_base_url)
        response = admin.get_billing_usage(start, end).result(timeout=TIMEOUT_S)
    except Exception as exc:
        reason = str(exc).splitlines()[0][:200] if str(exc) else ""
        return None, (
            f"Tinker's billed usage could not be read ({type(exc).__name__}{': ' + reason if reason else ''}): its "
            "billing API (AdminClient.get_billing_usage) needs the admin or billing-admin role. The figures shown "
            "are estimates."
        )
    return summarise(response, run_id, window), None
