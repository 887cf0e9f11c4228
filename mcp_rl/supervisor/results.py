"""The results of a run, as an agent judges it: state, final and best metrics with their steps,
a bounded history, where the weights are, and the W&B run when there is one.

The run's own files answer first; W&B (when enabled and reachable) adds its URL and any metric
the local record lacks. Nothing here fails because of W&B.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import anyio
from pydantic import BaseModel, Field

from mcp_rl.costs.summary import RunCost, add_billed, run_cost
from mcp_rl.costs.tinker_billing import billed_for_run
from mcp_rl.errors import NotFound, UnknownId, clip, clip_message
from mcp_rl.metrics import store
from mcp_rl.metrics.signal import LearningSignal, learning_signal, with_held_out
from mcp_rl.metrics.store import HistoryPoint, MetricSummary, WeightsInfo
from mcp_rl.metrics.wandb_reader import WandbMode, WandbQuery, WandbReport, WandbRunInfo, lookup
from mcp_rl.proof.held_out_note import held_out_note
from mcp_rl.proof.summary import HeldOutSummary, held_out_summary
from mcp_rl.runconfig import RunConfig
from mcp_rl.rundir import RUN_FILE, TrainerPhase, is_run_id
from mcp_rl.settings import Settings
from mcp_rl.supervisor.registry import Registry

# How long a W&B answer is reused: look-ups cost seconds, and W&B lags the local files anyway.
WANDB_CACHE_TTL_S = 60.0


class WandbSummary(BaseModel):
    mode: WandbMode
    project: str | None = None
    entity: str | None = None
    group: str | None = None
    runs: list[WandbRunInfo] = []


class RunResults(BaseModel):
    """What `rl_get_results` returns (also its outputSchema)."""

    run_id: str
    run_dir: str = Field(description="The run's folder: run.yaml, logs/, metrics.jsonl, checkpoints/.")
    state: str = Field(
        description="starting | running | stopping | completed | failed | stopped (unknown: no registry row)."
    )
    cause: str | None = Field(None, description="Why the run ended or failed, when recorded.")
    environment: str | None = None
    backend: str | None = None
    trainer_phase: TrainerPhase | None = Field(
        None, description="What the trainer was last doing (trainer_status.json)."
    )
    steps_completed: int = Field(0, description="Last trainer step with metrics.")
    num_steps: int | None = Field(None, description="Steps the run was configured for.")
    metrics: dict[str, MetricSummary] = Field(
        default_factory=dict,
        description="Per metric (reward/mean, train/loss, train/percent_correct, eval/percent_correct, ...): "
        "final and best value with their steps.",
    )
    held_out: HeldOutSummary | None = Field(
        None,
        description="Did it learn? The base (the run's first held-out evaluation, step 0) against the latest on the "
        "same items: both scores, the difference with its 95 % interval, p of the paired test (McNemar exact for "
        "right/wrong), items flipped each way, and one sentence. None: no held-out evaluation yet.",
    )
    learning_signal: LearningSignal | None = Field(
        None,
        description="The latest steps' learning signal (groups with no signal, answers trained on, reward spread), "
        "with a warning and advice when most groups carried none for several steps.",
    )
    held_out_note: str | None = Field(
        None,
        description="Why held_out is null and exactly what to do about it (None when held_out is given).",
    )
    history: list[HistoryPoint] = Field(
        default_factory=list, description=f"At most {store.MAX_HISTORY_POINTS} steps incl. first and last."
    )
    history_steps_total: int = Field(0, description="Steps in the full record (see the metrics resource).")
    cost: RunCost | None = Field(
        None,
        description="Tokens prefilled, sampled and trained so far and their estimated USD ($0 on the local "
        "backend; None: no step recorded a cost).",
    )
    weights: WeightsInfo = WeightsInfo()
    wandb_url: str | None = None
    wandb: WandbSummary | None = None
    notes: list[str] = Field(default_factory=list)
    plot_uri: str
    metrics_uri: str
    log_uris: dict[str, str] = Field(default_factory=dict)


def run_dir_of(settings: Settings, run_id: str) -> Path:
    return settings.runs_dir / run_id


def _registry_record(settings: Settings, run_id: str) -> Any:
    if not settings.state_db.exists():
        return None
    return Registry(settings.state_db).get_run(run_id)


def _unknown(run_id: str) -> NotFound:
    return UnknownId(f"Unknown run_id {clip(run_id)}; call rl_list_runs to see the runs there are.", "run_id", run_id)


def wandb_query(settings: Settings, run_id: str, config: RunConfig | None) -> WandbQuery:
    wb = config.trainer.wandb if config is not None else None
    mode: WandbMode
    if (wb is not None and not wb.enabled) or settings.wandb_mode == "disabled":
        mode = "disabled"
    elif settings.wandb_mode == "offline":
        mode = "offline"
    else:
        mode = "online"
    return WandbQuery(
        mode=mode,
        project=(wb.project if wb is not None else None) or settings.wandb_project or "mcp-rl",
        entity=(wb.entity if wb is not None else None) or settings.wandb_entity,
        group=(wb.group if wb is not None else None) or run_id,
        api_key=settings.wandb_api_key.get_secret_value() if settings.wandb_api_key else None,
        timeout_s=settings.wandb_deadline_s,
    )


async def get_results(
    settings: Settings,
    run_id: str,
    *,
    cache: dict[str, Any] | None = None,
) -> RunResults:
    """Results of `run_id`: the local record, then W&B. Raises NotFound for an unknown run."""
    results, query = await anyio.to_thread.run_sync(local_results, settings, run_id)
    await anyio.to_thread.run_sync(_with_billed, settings, results)
    report = await _wandb_report(query, cache)
    _merge_wandb(results, report)
    if report.mode == "offline":
        offline = sorted((Path(results.run_dir) / "wandb").glob("offline-run-*"))
        if offline:
            results.notes.append(
                f"W&B offline run(s) on disk: {', '.join(map(str, offline))} (upload: wandb sync <dir>)."
            )
    return results


def _with_billed(settings: Settings, results: RunResults) -> None:
    """A Tinker run's estimated cost with what Tinker's billing API reports beside it."""
    if results.backend != "tinker" or results.cost is None:
        return
    record = _registry_record(settings, results.run_id)
    if record is not None:
        started, ended = record.created_at, record.ended_at
    else:
        run_file = Path(results.run_dir) / RUN_FILE
        if not run_file.exists():
            return
        started, ended = run_file.stat().st_mtime, None
    billed, note = billed_for_run(settings, results.run_id, started, ended)
    add_billed(results.cost, billed, note)


def local_results(settings: Settings, run_id: str) -> tuple[RunResults, WandbQuery]:
    """Everything the run's own files say (blocking file reads), and where W&B would be."""
    if not is_run_id(run_id):
        raise _unknown(run_id)
    record = _registry_record(settings, run_id)
    run_dir = Path(record.run_dir) if record is not None else run_dir_of(settings, run_id)
    if record is None and not (run_dir / RUN_FILE).exists():
        raise _unknown(run_id)

    notes: list[str] = []
    config = None
    try:
        config = RunConfig.load(run_dir / RUN_FILE)
    except FileNotFoundError:
        notes.append("run.yaml is missing from the run directory.")
    except Exception as exc:  # a run from an older or newer mcp-rl, or damaged: answer with what we have
        notes.append(f"run.yaml could not be read: {clip_message(str(exc), 300)}")

    table = store.read_step_table(run_dir)
    status = store.read_trainer_status(run_dir)
    checkpoints = store.read_checkpoints(run_dir)
    weights = store.weights_info(checkpoints, status)

    metrics = store.summarise(table, store.summary_keys(table))
    results = RunResults(
        run_id=run_id,
        run_dir=str(run_dir),
        state=str(record.state) if record is not None else "unknown",
        cause=record.cause if record is not None else None,
        environment=(record.environment if record is not None else None)
        or (config.environment.name if config is not None else None),
        backend=(record.backend if record is not None else None) or (config.trainer.backend if config else None),
        trainer_phase=status.phase if status else None,
        steps_completed=table.trainer_last_step or 0,
        num_steps=(config.trainer.num_steps if config is not None else None) or (status.num_steps if status else None),
        metrics=metrics,
        held_out=(held_out := held_out_summary(run_dir)),
        learning_signal=with_held_out(learning_signal(table.rows), held_out),
        history=store.history(table),
        history_steps_total=len(table.rows),
        cost=run_cost(table.rows),
        weights=weights,
        wandb_url=(record.wandb_url if record is not None else None) or (status.wandb_url if status else None),
        notes=notes,
        plot_uri=f"rl://runs/{run_id}/plot.png",
        metrics_uri=f"rl://runs/{run_id}/metrics",
        log_uris={name: f"rl://runs/{run_id}/logs/{name}" for name in ("trainer", "env", "api", "supervisor")},
    )
    if results.held_out is None:
        ended = results.state in ("completed", "failed", "stopped", "unknown")
        results.held_out_note = held_out_note(run_dir, ended)
    notes.extend(store.damage_report(run_dir))
    if not table.rows:
        notes.append("No training step has been logged yet.")
    if table.bad_lines:
        notes.append(f"{table.bad_lines} unreadable line(s) in the metrics files were skipped.")
    if status is not None and status.error:
        notes.append(f"Trainer error: {status.error}")
    if weights.sampler_weights is None:
        notes.append("No sampler weights have been saved yet.")
    elif weights.sampler_exists is False:
        notes.append(f"The recorded weights folder {weights.sampler_weights} no longer exists.")
    results.notes = notes  # the model holds a copy of the list it was built with

    return results, wandb_query(settings, run_id, config)


async def _wandb_report(query: WandbQuery, cache: dict[str, Any] | None) -> WandbReport:
    key = f"wandb:{query.entity}/{query.project}/{query.group}"
    now = time.monotonic()
    if cache is not None and key in cache and now - cache[key][0] < WANDB_CACHE_TTL_S:
        cached: WandbReport = cache[key][1]
        return cached
    report = await lookup(query)
    # Only a real answer is reused; a failure is retried on the next call.
    if cache is not None and report.mode == "online" and report.runs:
        cache[key] = (now, report)
    return report


def _merge_wandb(results: RunResults, report: WandbReport) -> None:
    results.wandb = WandbSummary(
        mode=report.mode, project=report.project, entity=report.entity, group=report.group, runs=report.runs
    )
    results.wandb_url = results.wandb_url or report.url
    for key, summary in report.metrics.items():
        # The local record is the reference; W&B fills what it lacks (e.g. a lost run dir).
        results.metrics.setdefault(key, summary)
    results.notes.extend(report.notes)
