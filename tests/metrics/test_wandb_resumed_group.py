"""The W&B reader through the REAL `wandb.Api` against a loopback W&B (tests/fakes/wandb_server.py):
after a resume a run's group holds one trainer run per start and the newest is reported (its page
and its latest metrics); one `wandb.Api` (one login) serves every look-up of a process."""

from __future__ import annotations

import dataclasses

import pytest

from mcp_rl.metrics import wandb_reader
from mcp_rl.metrics.wandb_reader import WandbQuery, lookup
from tests.fakes.wandb_server import API_KEY, ENTITY, WandbServer, recorded_group

RUN_ID = "r3sum3d1"


def query(server: WandbServer, **overrides) -> WandbQuery:
    values = {
        "mode": "online",
        "project": "mcp-rl",
        "group": RUN_ID,
        "api_key": API_KEY,
        "timeout_s": 20.0,
        "base_url": server.base_url,
    }
    values.update(overrides)
    return WandbQuery(**values)


@pytest.fixture(autouse=True)
def fresh_api_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(wandb_reader, "_APIS", {})


def resumed_group() -> list:
    first, env, neighbour = recorded_group(RUN_ID, entity=ENTITY)
    # The second start resumed at step 20 and went on to step 30 (reward/mean 0.9 at the end).
    rows = [{"_step": s, "reward/mean": 0.9, "train/loss": 0.01} for s in range(21, 31)]
    resumed = dataclasses.replace(
        first, id="tr4in3r2", rows=rows, summary_metrics={"_step": 30, "reward/mean": 0.9, "train/loss": 0.01}
    )
    return [first, env, neighbour, resumed]


@pytest.mark.anyio
async def test_the_newest_trainer_run_of_a_resumed_group_is_reported() -> None:
    runs = resumed_group()
    with WandbServer(runs) as server:
        report = await lookup(query(server))
        runs_queries = [v for name, v in server.queries if name == "Runs"]
    assert report.notes == []
    assert [v["order"] for v in runs_queries] == ["-created_at"]
    assert report.url == f"{server.base_url}/{ENTITY}/mcp-rl/runs/tr4in3r2"
    assert report.metrics["reward/mean"].final == 0.9 and report.metrics["reward/mean"].final_step == 30
    assert [r.id for r in report.runs if r.job == "trainer"] == ["tr4in3r2", "tr4in3r1"]
    assert server.unauthorized == 0


@pytest.mark.anyio
async def test_one_wandb_api_per_process_and_credentials() -> None:
    with WandbServer(resumed_group()) as server:
        await lookup(query(server))
        await lookup(query(server))
        logins = [name for name, _ in server.queries if name == "Viewer"]
        assert len(logins) == 1
        # Another key is another client, and the fake refuses it at the wire.
        report = await lookup(query(server, api_key="j" * 40))
        assert server.unauthorized >= 1 and report.notes and "j" * 40 not in " ".join(report.notes)
