"""RunWatch: which URIs changed between two looks at the registry and the runs' files."""

from __future__ import annotations

import json

from mcp_rl.settings import Settings
from mcp_rl.supervisor.changes import RUNS_URI, RunWatch, run_uris
from mcp_rl.supervisor.registry import Registry
from mcp_rl.supervisor.states import RunState
from tests.kit.runs import register, write_run


def test_first_look_is_a_baseline_then_steps_and_states_are_reported(settings: Settings) -> None:
    watch = RunWatch(settings)
    assert watch.poll() == []  # no state.db yet: an empty baseline, and no error
    run_dir = write_run(settings, "w1", 3, state="starting")
    assert watch.poll() == [RUNS_URI, *run_uris("w1")]  # a run appeared
    assert watch.poll() == []  # nothing changed

    with open(run_dir / "metrics.jsonl", "a", encoding="utf-8") as fh:
        fh.write(json.dumps({"step": 4, "reward/mean": 1.0}) + "\n")
    assert watch.poll() == run_uris("w1")

    with open(run_dir / "env_metrics.jsonl", "a", encoding="utf-8") as fh:
        fh.write(json.dumps({"step": 4, "train/percent_correct": 0.5}) + "\n")
    assert watch.poll() == run_uris("w1")

    Registry(settings.state_db).transition("w1", RunState.RUNNING)
    assert watch.poll() == [RUNS_URI, *run_uris("w1")]
    assert watch.poll() == []


def test_a_new_run_changes_the_list(settings: Settings) -> None:
    write_run(settings, "a", 2, state="completed")
    watch = RunWatch(settings)
    watch.poll()
    run_dir = settings.runs_dir / "b"
    run_dir.mkdir(parents=True)
    register(settings, "b", run_dir, "starting")
    assert watch.poll() == [RUNS_URI, *run_uris("b")]


def test_ended_runs_are_not_statted_again(settings: Settings) -> None:
    run_dir = write_run(settings, "done", 2, state="completed")
    watch = RunWatch(settings)
    watch.poll()
    # An ended run's files do not change; if they did (a late write), it is not worth a stat per
    # poll per old run: the list of runs can be long.
    with open(run_dir / "metrics.jsonl", "a", encoding="utf-8") as fh:
        fh.write(json.dumps({"step": 3}) + "\n")
    assert watch.poll() == []
