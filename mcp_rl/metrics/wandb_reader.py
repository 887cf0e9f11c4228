"""Reading a run's metrics back from W&B: by group, with the metric names actually logged.

The original looked runs up by a display name nobody used and read keys nobody logged
(reference/upstream.md, bugs 1-2). Here the trainer and the environment share one W&B group named
after the run, so the look-up is `filters={"group": <run id>}` in `entity/project`, and the keys
read are the trainer's (`reward/mean`, `train/loss`) and the environment's, which Atropos prefixes
with its `wandb_name` and a counter (`gsm8k_0_train/percent_correct`); the prefix is removed so
both sources use the local names.

W&B is a second source, never a requirement: offline and disabled modes skip the look-up, and every
failure (no key, network, auth, a slow answer) becomes a note. `wandb` is imported only when a
look-up actually happens.
"""

from __future__ import annotations

import hashlib
import logging
import re
import threading
from typing import Any, Literal

import anyio
from pydantic import BaseModel, Field

from mcp_rl.metrics.store import MetricSummary, goal_of
from mcp_rl.rundir import LOSS_KEY, REWARD_KEY

log = logging.getLogger(__name__)

WandbMode = Literal["online", "offline", "disabled"]
# Seconds an MCP tool may wait on W&B before answering with local metrics and a note.
DEFAULT_DEADLINE_S = 8.0
HISTORY_SAMPLES = 500
# Atropos env keys: f"{wandb_name}_{n}_{key}", key under train/, eval/ or train_perf/.
_ENV_KEY = re.compile(r"^(?P<prefix>.+?_\d+)_(?P<key>(?:train|eval|train_perf)/.+)$")
_SUMMARY_KEYS_WANTED = (REWARD_KEY, LOSS_KEY)


class WandbQuery(BaseModel):
    """Where to look: everything comes from the run's own config and our settings."""

    mode: WandbMode
    project: str
    entity: str | None = Field(None, description="WANDB_ENTITY; None: the API key's default entity.")
    group: str
    api_key: str | None = Field(None, repr=False, exclude=True)
    base_url: str | None = None
    timeout_s: float = DEFAULT_DEADLINE_S


class WandbRunInfo(BaseModel):
    name: str | None = None
    id: str | None = None
    url: str | None = None
    state: str | None = None
    job: Literal["trainer", "env"] | None = None


class WandbReport(BaseModel):
    mode: WandbMode
    entity: str | None = None
    project: str
    group: str
    url: str | None = Field(None, description="The trainer's W&B run (else the first run of the group).")
    runs: list[WandbRunInfo] = []
    metrics: dict[str, MetricSummary] = {}
    notes: list[str] = []


def normalise_key(key: str) -> str | None:
    """The local name of a logged W&B key, or None if it is not a training metric."""
    if key.startswith("_"):  # _step, _runtime, _timestamp, _wandb: W&B bookkeeping
        return None
    match = _ENV_KEY.match(key)
    if match:
        return match["key"]
    if key.startswith("server/"):
        return None
    return key


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value


def _job_of(run: Any, summary: dict[str, Any]) -> Literal["trainer", "env"] | None:
    # mcp-rl's trainer sets job_type; tinker-atropos's tags its run; both log reward/mean.
    tags = list(getattr(run, "tags", None) or [])
    if getattr(run, "job_type", None) == "trainer" or "trainer" in tags or REWARD_KEY in summary:
        return "trainer"
    if any(_ENV_KEY.match(k) for k in summary):
        return "env"
    return None


def read_runs(api: Any, query: WandbQuery) -> WandbReport:
    """Look the group up through a `wandb.Api`-like object (blocking; may raise anything)."""
    entity = query.entity or getattr(api, "default_entity", None)
    report = WandbReport(mode="online", entity=entity, project=query.project, group=query.group)
    path = f"{entity}/{query.project}" if entity else query.project
    # Newest first: after a resume the group holds one trainer run per start, and the newest one
    # is the run's W&B page and the source of its latest metrics.
    runs = list(api.runs(path, filters={"group": query.group}, order="-created_at", per_page=50))
    if not runs:
        report.notes.append(f"W&B: no runs in group {query.group!r} of {path} (yet).")
        return report
    for run in runs:
        summary = dict(getattr(run, "summary_metrics", None) or {})
        info = WandbRunInfo(
            name=getattr(run, "name", None),
            id=getattr(run, "id", None),
            url=getattr(run, "url", None),
            state=getattr(run, "state", None),
            job=_job_of(run, summary),
        )
        report.runs.append(info)
        _add_metrics(report, run, summary)
    trainer = next((r for r in report.runs if r.job == "trainer"), None)
    report.url = (trainer or report.runs[0]).url
    return report


def _add_metrics(report: WandbReport, run: Any, summary: dict[str, Any]) -> None:
    # Raw keys we care about: accuracy-like env keys, eval keys, and the trainer's two.
    wanted: dict[str, str] = {}
    for raw, value in summary.items():
        local = normalise_key(raw)
        if local is None or not _is_number(value):
            continue
        if local in _SUMMARY_KEYS_WANTED or "percent_correct" in local or local.startswith("eval/"):
            wanted[raw] = local
    for raw, local in wanted.items():
        if local in report.metrics:
            continue
        # One key per request: sampled history returns only rows that have every key asked for.
        rows = run.history(samples=HISTORY_SAMPLES, keys=[raw], pandas=False)
        points = [(int(r["_step"]), float(r[raw])) for r in rows if _is_number(r.get(raw)) and "_step" in r]
        final = float(summary[raw])
        # The summary holds the last value logged; its step is the last history point's.
        final_step = points[-1][0] if points else int(summary.get("_step", 0))
        goal = goal_of(local)
        pick = max if goal == "max" else min
        best_step, best = pick(
            points or [(final_step, final)], key=lambda p: (p[1], -p[0]) if goal == "max" else (p[1], p[0])
        )
        report.metrics[local] = MetricSummary(
            final=final, final_step=final_step, best=best, best_step=best_step, goal=goal, source="wandb"
        )


# One `wandb.Api` per credentials for the whole process: building one logs in (a request).
_APIS: dict[tuple[str, str | None, int], Any] = {}
_APIS_LOCK = threading.Lock()


def _default_api(query: WandbQuery) -> Any:
    import wandb  # heavy (and starts wandb-core): only when a look-up really happens

    timeout = max(1, int(query.timeout_s))
    # The key is held as a digest: the cache lives as long as the process.
    key = (hashlib.sha256((query.api_key or "").encode()).hexdigest(), query.base_url, timeout)
    with _APIS_LOCK:
        api = _APIS.get(key)
        if api is None:
            overrides = {"base_url": query.base_url} if query.base_url else None
            api = _APIS[key] = wandb.Api(api_key=query.api_key, timeout=timeout, overrides=overrides)
        return api


def skipped(query: WandbQuery) -> WandbReport | None:
    """The report for modes that need no look-up (None: look it up)."""
    report = WandbReport(mode=query.mode, entity=query.entity, project=query.project, group=query.group)
    if query.mode == "disabled":
        return report
    if query.mode == "offline":
        report.notes.append(
            "W&B is offline: runs are kept on disk (sync them with `wandb sync`); local metrics answer everything."
        )
        return report
    if not query.api_key:
        report.notes.append("W&B look-up skipped: WANDB_API_KEY is not set; local metrics answer everything.")
        return report
    return None


async def lookup(query: WandbQuery) -> WandbReport:
    """The W&B view of a run, within `query.timeout_s`; never raises.

    The blocking client runs in a worker thread that is abandoned at the deadline: the tool
    answers on time and the thread ends on its own (its HTTP timeout bounds it).
    """
    early = skipped(query)
    if early is not None:
        return early

    def work() -> WandbReport:
        return read_runs(_default_api(query), query)

    base = WandbReport(mode=query.mode, entity=query.entity, project=query.project, group=query.group)
    try:
        with anyio.fail_after(query.timeout_s):
            return await anyio.to_thread.run_sync(work, abandon_on_cancel=True)
    except TimeoutError:
        base.notes.append(f"W&B did not answer within {query.timeout_s:g} s; local metrics only.")
    except Exception as exc:  # any W&B or network failure is a note, never a tool error
        log.info("W&B look-up for group %s failed: %r", query.group, exc)
        reason = _short(exc).replace(query.api_key, "***") if query.api_key else _short(exc)
        base.notes.append(f"W&B look-up failed ({type(exc).__name__}: {reason}); local metrics only.")
    return base


def _short(exc: BaseException, limit: int = 200) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
