"""The W&B reader against recorded-shape responses (tests/fakes/fake_wandb.py): group filter,
the metric keys actually logged, and failures as notes."""

from __future__ import annotations

import inspect
import time

import pytest

from mcp_rl.metrics.wandb_reader import WandbQuery, lookup, normalise_key, read_runs
from tests.fakes.fake_wandb import (
    FAKE_ENTITY,
    FailingWandbApi,
    FakeRun,
    FakeWandbApi,
    HangingWandbApi,
    recorded_group,
)

RUN_ID = "a1b2c3d4"


def query(**overrides) -> WandbQuery:
    values = dict(mode="online", project="mcp-rl", group=RUN_ID, api_key="k" * 40, timeout_s=5.0)
    values.update(overrides)
    return WandbQuery(**values)


def test_fake_matches_the_real_wandb_signatures() -> None:
    """The fake is only worth something while it has the real client's shape."""
    from wandb.apis.public import Api, Run

    for fake, real in ((FakeWandbApi.runs, Api.runs), (FakeRun.history, Run.history)):
        fake_params = list(inspect.signature(fake).parameters)
        real_params = list(inspect.signature(real).parameters)
        assert fake_params == real_params, (fake.__qualname__, fake_params, real_params)
    assert isinstance(inspect.getattr_static(Run, "url"), property)
    assert "summary_metrics" in dir(Run) and "default_entity" in dir(Api)


def test_runs_are_found_by_group_in_the_default_entity() -> None:
    api = FakeWandbApi(recorded_group(RUN_ID))
    report = read_runs(api, query())
    assert api.runs_calls == [{"path": f"{FAKE_ENTITY}/mcp-rl", "filters": {"group": RUN_ID}}]
    assert report.entity == FAKE_ENTITY
    assert {r.name for r in report.runs} == {f"{RUN_ID}-trainer", "gsm8k-2026-11-22-qwerty"}
    assert report.url == f"https://wandb.fake/{FAKE_ENTITY}/mcp-rl/runs/tr4in3r1"
    assert {r.job for r in report.runs} == {"trainer", "env"}


def test_entity_from_wandb_entity_wins_over_the_key_default() -> None:
    runs = recorded_group(RUN_ID, entity="team-x")
    api = FakeWandbApi(runs)
    report = read_runs(api, query(entity="team-x"))
    assert api.runs_calls[0]["path"] == "team-x/mcp-rl"
    assert len(report.runs) == 2


def test_metric_keys_are_the_logged_ones_with_the_env_prefix_removed() -> None:
    steps = 20
    runs = recorded_group(RUN_ID, steps=steps)
    report = read_runs(FakeWandbApi(runs), query())
    m = report.metrics
    assert set(m) == {"reward/mean", "train/loss", "train/percent_correct", "eval/percent_correct"}
    assert m["reward/mean"].final == 1.0 and m["reward/mean"].final_step == steps
    assert m["reward/mean"].best_step == steps and m["reward/mean"].source == "wandb"
    assert m["train/loss"].goal == "min" and m["train/loss"].best == pytest.approx(1 / steps)
    assert m["train/percent_correct"].best == pytest.approx(0.9) and m["train/percent_correct"].best_step == steps // 2
    assert m["train/percent_correct"].final == pytest.approx(0.9 - (steps - steps // 2) * 0.01)
    assert m["eval/percent_correct"].final == 0.5 and m["eval/percent_correct"].final_step == steps
    trainer, env = runs[0], runs[1]
    assert sorted(c["keys"][0] for c in trainer.history_calls) == ["reward/mean", "train/loss"]
    assert sorted(c["keys"][0] for c in env.history_calls) == [
        "gsm8k_0_eval/percent_correct",
        "gsm8k_0_train/percent_correct",
    ]
    # Never the keys the original read (upstream bug 2).
    assert all(c["keys"][0] != "train/reward_mean" for c in trainer.history_calls)


def test_the_neighbouring_group_is_not_mixed_in() -> None:
    report = read_runs(FakeWandbApi(recorded_group(RUN_ID)), query())
    assert report.metrics["reward/mean"].best != 99.0
    assert all(r.id != "0ther0ne" for r in report.runs)


def test_an_empty_group_is_a_note() -> None:
    report = read_runs(FakeWandbApi(recorded_group("someone-else")), query())
    assert report.runs == [] and report.url is None
    assert "no runs in group" in report.notes[0]


def test_key_normalisation() -> None:
    assert normalise_key("gsm8k_0_train/percent_correct") == "train/percent_correct"
    assert normalise_key("my_env_name_12_eval/percent_correct") == "eval/percent_correct"
    # mcp-rl names the environment's W&B run f"{env}-{run_id}"; run ids may hold _ and digits.
    assert normalise_key("arithmetic-a_12cd_0_train/percent_correct") == "train/percent_correct"
    assert normalise_key("reward/mean") == "reward/mean"
    assert normalise_key("_step") is None and normalise_key("server/server_0_request_time_avg") is None


@pytest.mark.anyio
async def test_unreachable_wandb_is_a_note_and_the_key_is_not_in_it() -> None:
    key = "s" * 40
    api = FailingWandbApi(f"refused for key {key}")
    report = await lookup(query(api_key=key), lambda q: api)
    assert report.runs == [] and report.metrics == {}
    assert len(report.notes) == 1 and "W&B look-up failed (ConnectionError" in report.notes[0]
    assert key not in report.notes[0]


@pytest.mark.anyio
async def test_a_hanging_wandb_is_cut_at_the_deadline() -> None:
    api = HangingWandbApi()
    started = time.monotonic()
    try:
        report = await lookup(query(timeout_s=0.5), lambda q: api)
    finally:
        api.release.set()
    assert time.monotonic() - started < 3
    assert "did not answer within 0.5 s" in report.notes[0]


@pytest.mark.anyio
async def test_offline_disabled_and_keyless_modes_make_no_call() -> None:
    def explode(q):
        raise AssertionError("no W&B call expected")

    offline = await lookup(query(mode="offline"), explode)
    assert offline.mode == "offline" and "offline" in offline.notes[0]
    disabled = await lookup(query(mode="disabled"), explode)
    assert disabled.mode == "disabled" and disabled.notes == []
    keyless = await lookup(query(api_key=None), explode)
    assert "WANDB_API_KEY is not set" in keyless.notes[0]


@pytest.mark.anyio
async def test_the_real_client_against_an_unreachable_host_answers_with_a_note() -> None:
    """No fake: the installed wandb client pointed at a closed port, within the deadline."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, never listening: connections are refused
        started = time.monotonic()
        report = await lookup(query(base_url=f"http://127.0.0.1:{port}", timeout_s=6.0))
    assert time.monotonic() - started < 8
    assert report.runs == [] and len(report.notes) == 1
    assert report.notes[0].startswith(("W&B look-up failed", "W&B did not answer"))
