"""The W&B reader through the REAL `wandb.Api` against a loopback W&B (tests/fakes/wandb_server.py):
group filter, the metric keys actually logged, and failures as notes."""

from __future__ import annotations

import json
import time

import pytest

from mcp_rl.metrics import wandb_reader
from mcp_rl.metrics.wandb_reader import WandbQuery, WandbReport, lookup, normalise_key
from tests.fakes.wandb_server import API_KEY, ENTITY, FakeRun, WandbServer, recorded_group

pytestmark = pytest.mark.anyio

RUN_ID = "a1b2c3d4"


@pytest.fixture(autouse=True)
def fresh_api_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test logs in to its own server (the reader keeps one `wandb.Api` per process)."""
    monkeypatch.setattr(wandb_reader, "_APIS", {})


def query(server: WandbServer | None = None, **overrides: object) -> WandbQuery:
    # A generous deadline: the look-ups here answer in well under a second, but the machine is shared.
    values: dict[str, object] = {
        "mode": "online",
        "project": "mcp-rl",
        "group": RUN_ID,
        "api_key": API_KEY,
        "timeout_s": 20.0,
        "base_url": server.base_url if server else None,
    }
    values.update(overrides)
    return WandbQuery.model_validate(values)


async def read(runs: list[FakeRun], **overrides: object) -> tuple[WandbReport, WandbServer]:
    with WandbServer(runs) as server:
        report = await lookup(query(server, **overrides))
    return report, server


def _runs_queries(server: WandbServer) -> list[dict[str, object]]:
    return [variables for name, variables in server.queries if name == "Runs"]


def _history_keys(server: WandbServer) -> dict[str, list[str]]:
    """The keys each run's sampled history was asked for (one request per key)."""
    keys: dict[str, list[str]] = {}
    for name, variables in server.queries:
        if name == "RunSampledHistory":
            spec = json.loads(variables["specs"][0])
            keys.setdefault(variables["name"], []).extend(k for k in spec["keys"] if k != "_step")
    return {run: sorted(asked) for run, asked in keys.items()}


async def test_runs_are_found_by_group_in_the_default_entity() -> None:
    report, server = await read(recorded_group(RUN_ID))
    [runs_query] = _runs_queries(server)
    assert (runs_query["entity"], runs_query["project"]) == (ENTITY, "mcp-rl")
    assert json.loads(runs_query["filters"]) == {"group": RUN_ID}
    assert report.entity == ENTITY and report.notes == []
    assert {r.name for r in report.runs} == {f"{RUN_ID}-trainer", "gsm8k-2026-11-22-qwerty"}
    assert report.url == f"{server.base_url}/{ENTITY}/mcp-rl/runs/tr4in3r1"
    assert {r.job for r in report.runs} == {"trainer", "env"}
    assert server.unauthorized == 0


async def test_entity_from_wandb_entity_wins_over_the_key_default() -> None:
    report, server = await read(recorded_group(RUN_ID, entity="team-x"), entity="team-x")
    assert _runs_queries(server)[0]["entity"] == "team-x"
    assert report.entity == "team-x" and len(report.runs) == 2


async def test_metric_keys_are_the_logged_ones_with_the_env_prefix_removed() -> None:
    steps = 20
    report, server = await read(recorded_group(RUN_ID, steps=steps))
    m = report.metrics
    assert set(m) == {"reward/mean", "train/loss", "train/percent_correct", "eval/percent_correct"}
    assert m["reward/mean"].final == 1.0 and m["reward/mean"].final_step == steps
    assert m["reward/mean"].best_step == steps and m["reward/mean"].source == "wandb"
    assert m["train/loss"].goal == "min" and m["train/loss"].best == pytest.approx(1 / steps)
    assert m["train/percent_correct"].best == pytest.approx(0.9) and m["train/percent_correct"].best_step == steps // 2
    assert m["train/percent_correct"].final == pytest.approx(0.9 - (steps - steps // 2) * 0.01)
    assert m["eval/percent_correct"].final == 0.5 and m["eval/percent_correct"].final_step == steps
    # Never the keys the original read (upstream bug 2), never the bookkeeping or server timings.
    assert _history_keys(server) == {
        "tr4in3r1": ["reward/mean", "train/loss"],
        "env0run1": ["gsm8k_0_eval/percent_correct", "gsm8k_0_train/percent_correct"],
    }


async def test_the_neighbouring_group_is_not_mixed_in() -> None:
    report, server = await read(recorded_group(RUN_ID))
    assert report.metrics["reward/mean"].best != 99.0
    assert all(r.id != "0ther0ne" for r in report.runs)
    assert "0ther0ne" not in _history_keys(server)


async def test_an_empty_group_is_a_note() -> None:
    report, _ = await read(recorded_group("someone-else"))
    assert report.runs == [] and report.url is None
    assert "no runs in group" in report.notes[0]


def test_key_normalisation() -> None:
    assert normalise_key("gsm8k_0_train/percent_correct") == "train/percent_correct"
    assert normalise_key("my_env_name_12_eval/percent_correct") == "eval/percent_correct"
    # mcp-rl names the environment's W&B run f"{env}-{run_id}"; run ids may hold _ and digits.
    assert normalise_key("arithmetic-a_12cd_0_train/percent_correct") == "train/percent_correct"
    assert normalise_key("reward/mean") == "reward/mean"
    assert normalise_key("_step") is None and normalise_key("server/server_0_request_time_avg") is None


async def test_a_refusing_wandb_is_a_note_and_the_key_is_not_in_it() -> None:
    with WandbServer(recorded_group(RUN_ID)) as server:
        # The service's error message comes back through the client verbatim: here it names the key.
        server.fail_runs_with = f"refused for key {API_KEY}"
        report = await lookup(query(server))
    assert report.runs == [] and report.metrics == {}
    assert len(report.notes) == 1 and report.notes[0].startswith("W&B look-up failed (")
    assert "refused for key ***" in report.notes[0] and API_KEY not in report.notes[0]


async def test_a_hanging_wandb_is_cut_at_the_deadline() -> None:
    with WandbServer(recorded_group(RUN_ID)) as server:
        server.hang_runs = True
        started = time.monotonic()
        report = await lookup(query(server, timeout_s=0.5))
        elapsed = time.monotonic() - started
    assert elapsed < 10  # cut at the 0.5 s deadline, not left hanging
    assert report.runs == [] and "did not answer within 0.5 s" in report.notes[0]


async def test_offline_disabled_and_keyless_modes_make_no_call() -> None:
    with WandbServer(recorded_group(RUN_ID)) as server:
        offline = await lookup(query(server, mode="offline"))
        disabled = await lookup(query(server, mode="disabled"))
        keyless = await lookup(query(server, api_key=None))
    assert server.queries == [] and server.unauthorized == 0
    assert offline.mode == "offline" and "offline" in offline.notes[0]
    assert disabled.mode == "disabled" and disabled.notes == []
    assert "WANDB_API_KEY is not set" in keyless.notes[0]


async def test_the_real_client_against_an_unreachable_host_answers_with_a_note() -> None:
    """No server at all: the installed wandb client pointed at a closed port, within the deadline."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, never listening: connections are refused
        started = time.monotonic()
        report = await lookup(query(base_url=f"http://127.0.0.1:{port}", timeout_s=2.0))
    assert time.monotonic() - started < 12
    assert report.runs == [] and len(report.notes) == 1
    assert report.notes[0].startswith(("W&B look-up failed", "W&B did not answer"))
    assert API_KEY not in report.notes[0]
