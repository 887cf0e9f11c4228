"""After a resume a run's W&B group holds one trainer run per start: the reader reports the newest
(its page and its latest metrics). And one `wandb.Api` (one login) serves a whole process."""

from __future__ import annotations

import dataclasses

import pytest

from mcp_rl.metrics import wandb_reader
from mcp_rl.metrics.wandb_reader import WandbQuery, read_runs
from tests.fakes.fake_wandb import FakeWandbApi, recorded_group

RUN_ID = "r3sum3d1"


def query(**overrides) -> WandbQuery:
    values = {"mode": "online", "project": "mcp-rl", "group": RUN_ID, "api_key": "k" * 40, "timeout_s": 5.0}
    values.update(overrides)
    return WandbQuery(**values)


def test_the_newest_trainer_run_of_a_resumed_group_is_reported() -> None:
    first, env, neighbour = recorded_group(RUN_ID)
    # The second start resumed at step 20 and went on to step 30 (reward/mean 0.9 at the end).
    rows = [{"_step": s, "reward/mean": 0.9, "train/loss": 0.01} for s in range(21, 31)]
    resumed = dataclasses.replace(first, id="tr4in3r2", rows=rows, history_calls=[],
                                  summary_metrics={"_step": 30, "reward/mean": 0.9, "train/loss": 0.01})
    api = FakeWandbApi([first, env, neighbour, resumed])
    report = read_runs(api, query())
    assert api.orders == ["-created_at"]
    assert report.url == resumed.url
    assert report.metrics["reward/mean"].final == 0.9 and report.metrics["reward/mean"].final_step == 30
    assert [r.id for r in report.runs if r.job == "trainer"] == ["tr4in3r2", "tr4in3r1"]


def test_one_wandb_api_per_process_and_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    import wandb

    built: list[dict] = []

    class CountingApi:
        def __init__(self, **kwargs) -> None:
            built.append(kwargs)

    monkeypatch.setattr(wandb, "Api", CountingApi)
    monkeypatch.setattr(wandb_reader, "_APIS", {})
    a = wandb_reader._default_api(query())
    b = wandb_reader._default_api(query())
    c = wandb_reader._default_api(query(api_key="j" * 40))
    assert a is b and c is not a and len(built) == 2
