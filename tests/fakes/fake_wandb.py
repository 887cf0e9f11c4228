"""FAKE W&B public API: recorded-shape responses served through a `wandb.Api` look-alike.

W&B online is a paid remote service, so tests stand in for it at the `wandb.Api` boundary: the
objects below have the same method names and parameters as `wandb.apis.public.Api.runs` and
`Run.history` (a test checks the signatures against the installed wandb), and answer like the
service does: `runs(path, filters)` applies the filter server-side, `history(keys=[...])` returns
only rows that carry the keys, with `_step`. The data is the shape of a real run pair of one
group: the trainer's run (job_type "trainer", keys `reward/mean`, `train/loss`, ...) and the
Atropos environment's run (keys prefixed `gsm8k_0_`, plus unprefixed `server/...` timings).
Every call is recorded so tests can assert the group filter and the keys asked for.

This is a Python-level look-alike, not the wire: new tests use tests/fakes/wandb_server.py, which
serves the same `FakeRun` records over HTTP (GraphQL) to the real `wandb.Api`.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

FAKE_ENTITY = "fake-entity"
FAKE_APP_URL = "https://wandb.fake"


@dataclass
class FakeRun:
    entity: str
    project: str
    id: str
    name: str
    group: str
    state: str = "finished"
    job_type: str | None = None
    tags: list[str] = field(default_factory=list)
    summary_metrics: dict[str, Any] = field(default_factory=dict)
    rows: list[dict[str, Any]] = field(default_factory=list)
    history_calls: list[dict[str, Any]] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"{FAKE_APP_URL}/{self.entity}/{self.project}/runs/{self.id}"

    def history(
        self,
        samples: int = 500,
        keys: list[str] | None = None,
        x_axis: str = "_step",
        pandas: bool = True,
        stream: str = "default",
    ) -> list[dict[str, Any]]:
        self.history_calls.append({"samples": samples, "keys": keys, "x_axis": x_axis, "pandas": pandas})
        if pandas:
            raise AssertionError("fake W&B: the reader must ask for pandas=False (pandas may be absent)")
        if keys:
            rows = [{x_axis: r[x_axis], **{k: r[k] for k in keys}} for r in self.rows if all(k in r for k in keys)]
        else:
            rows = [dict(r) for r in self.rows]
        if len(rows) > samples:
            stride = len(rows) / samples
            rows = [rows[int(i * stride)] for i in range(samples)]
        return rows


class FakeWandbApi:
    """Stands in for `wandb.Api()`; `runs()` filters like the service does."""

    def __init__(self, runs: list[FakeRun], default_entity: str = FAKE_ENTITY) -> None:
        self._runs = runs
        self.default_entity = default_entity
        self.runs_calls: list[dict[str, Any]] = []

    def runs(
        self,
        path: str | None = None,
        filters: dict[str, Any] | None = None,
        order: str = "+created_at",
        per_page: int = 50,
        include_sweeps: bool = False,
        lazy: bool = True,
    ) -> list[FakeRun]:
        self.runs_calls.append({"path": path, "filters": filters})
        entity, _, project = (path or "").rpartition("/")
        matched = [r for r in self._runs if r.entity == (entity or self.default_entity) and r.project == project]
        for name, wanted in (filters or {}).items():
            attribute = {"group": "group", "display_name": "name", "displayName": "name"}.get(name)
            if attribute is None:
                raise AssertionError(f"fake W&B: filter {name!r} not modelled")
            matched = [r for r in matched if getattr(r, attribute) == wanted]
        # The runs were created in list order; the service sorts by creation time.
        if order not in ("+created_at", "-created_at"):
            raise AssertionError(f"fake W&B: order {order!r} not modelled")
        return matched if order == "+created_at" else matched[::-1]


class FailingWandbApi:
    """A W&B that cannot be reached: every call raises like the client does offline."""

    def __init__(self, message: str = "Failed to verify credentials with https://api.wandb.ai: connection refused") -> None:
        self.message = message
        self.default_entity = FAKE_ENTITY

    def runs(self, *args: Any, **kwargs: Any) -> list[FakeRun]:
        raise ConnectionError(self.message)


class HangingWandbApi:
    """A W&B that never answers (until released), to test the deadline."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.default_entity = FAKE_ENTITY

    def runs(self, *args: Any, **kwargs: Any) -> list[FakeRun]:
        self.release.wait(30)
        return []


def recorded_group(run_id: str, entity: str = FAKE_ENTITY, project: str = "mcp-rl", steps: int = 20) -> list[FakeRun]:
    """The two runs one mcp-rl run leaves in W&B, plus a neighbour in another group.

    Values follow one rule so tests can compute what to expect: reward/mean at step s is s/steps
    (best and final at the last step), train/loss is 1/s (best at the last step), the env's
    percent_correct peaks at step steps//2.
    """
    trainer_rows = [
        {"_step": s, "_runtime": 3.0 * s, "reward/mean": s / steps, "train/loss": 1.0 / s, "train/learning_rate": 4e-5}
        for s in range(1, steps + 1)
    ]
    peak = steps // 2
    env_rows = [
        {"_step": s, "gsm8k_0_train/percent_correct": 0.9 - abs(s - peak) * 0.01, "server/server_0_request_time_avg": 0.2}
        for s in range(1, steps + 1)
    ]
    env_rows[-1]["gsm8k_0_eval/percent_correct"] = 0.5
    trainer = FakeRun(
        entity=entity,
        project=project,
        id="tr4in3r1",
        name=f"{run_id}-trainer",  # as mcp_rl.trainer names it (job_type "trainer", no tags)
        group=run_id,
        job_type="trainer",
        summary_metrics={
            "_step": steps,
            "_runtime": 3.0 * steps,
            "_timestamp": 1_790_000_000.0,
            "_wandb": {"runtime": 3 * steps},
            "reward/mean": trainer_rows[-1]["reward/mean"],
            "train/loss": trainer_rows[-1]["train/loss"],
            "train/learning_rate": 4e-5,
        },
        rows=trainer_rows,
    )
    env = FakeRun(
        entity=entity,
        project=project,
        id="env0run1",
        name="gsm8k-2026-11-22-qwerty",
        group=run_id,
        summary_metrics={
            "_step": steps,
            "gsm8k_0_train/percent_correct": env_rows[-1]["gsm8k_0_train/percent_correct"],
            "gsm8k_0_eval/percent_correct": 0.5,
            "gsm8k_0_train/rollouts": {"_type": "table-file", "path": "media/table/train/rollouts.json"},
            "server/server_0_request_time_avg": 0.2,
        },
        rows=env_rows,
    )
    neighbour = FakeRun(
        entity=entity,
        project=project,
        id="0ther0ne",
        name=f"{run_id}x-trainer",
        group=f"{run_id}x",
        tags=["trainer"],
        summary_metrics={"_step": 3, "reward/mean": 99.0, "train/loss": 0.0},
        rows=[{"_step": 3, "reward/mean": 99.0, "train/loss": 0.0}],
    )
    return [trainer, env, neighbour]
