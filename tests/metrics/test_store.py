"""The local metrics store: robust reading, final/best with steps, bounded history."""

from __future__ import annotations

import json
import struct
from pathlib import Path

from mcp_rl.metrics import store
from mcp_rl.metrics.plot import HEIGHT_PX, WIDTH_PX, render_png
from mcp_rl.settings import Settings
from tests.kit.runs import loss_at, reward_at, write_run


def test_partial_last_line_is_skipped_not_an_error(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    path.write_text(json.dumps({"step": 1, "reward/mean": 0.5}) + "\n" + '{"step": 2, "reward/me')
    read = store.read_jsonl(path)
    assert [r["step"] for r in read.rows] == [1]
    assert read.partial_tail and read.bad_lines == 0
    # Once the writer finishes the line, the next read sees it.
    path.write_text(path.read_text() + 'an": 0.7}\n')
    assert [r["reward/mean"] for r in store.read_jsonl(path).rows] == [0.5, 0.7]


def test_garbage_lines_and_non_numbers_are_skipped(tmp_path: Path) -> None:
    run_dir = tmp_path
    (run_dir / "metrics.jsonl").write_text(
        "\n".join(
            [
                json.dumps({"step": 1, "reward/mean": 0.1, "train/loss": 2.0}),
                "not json",
                json.dumps([1, 2]),
                json.dumps({"no_step": True}),
                '{"step": 2, "reward/mean": NaN, "train/loss": 1.0}',
                json.dumps({"step": 3, "reward/mean": 0.3, "train/loss": "x"}),
            ]
        )
        + "\n"
    )
    table = store.read_step_table(run_dir)
    assert [r["step"] for r in table.rows] == [1, 2, 3]
    assert table.bad_lines == 3
    assert table.series("reward/mean") == [(1, 0.1), (3, 0.3)]
    assert table.series("train/loss") == [(1, 2.0), (2, 1.0)]


def test_a_resumed_step_logged_twice_keeps_the_later_line(tmp_path: Path) -> None:
    lines = [{"step": 1, "reward/mean": 0.1}, {"step": 2, "reward/mean": 0.2}, {"step": 2, "reward/mean": 0.25}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    assert store.read_step_table(tmp_path).series("reward/mean") == [(1, 0.1), (2, 0.25)]


def test_final_and_best_carry_their_steps(settings: Settings) -> None:
    steps = 30
    run_dir = write_run(settings, "r1", steps, env_metrics=True)
    table = store.read_step_table(run_dir)
    summary = store.summarise(table, store.summary_keys(table))
    rewards = {s: reward_at(s, steps) for s in range(1, steps + 1)}
    best_step = max(rewards, key=lambda s: rewards[s])
    assert summary["reward/mean"].final == rewards[steps] and summary["reward/mean"].final_step == steps
    assert summary["reward/mean"].best == rewards[best_step] and summary["reward/mean"].best_step == best_step
    assert summary["train/loss"].goal == "min"
    assert summary["train/loss"].best == loss_at(steps) and summary["train/loss"].best_step == steps
    # Environment metrics merged by step.
    assert summary["train/percent_correct"].final == 0.5
    assert summary["eval/percent_correct"].final == 0.75 and summary["eval/percent_correct"].final_step == steps
    assert list(summary)[:2] == ["reward/mean", "train/loss"]


def test_history_of_2000_steps_is_bounded_and_keeps_ends_and_extremes(settings: Settings) -> None:
    steps = 2000
    run_dir = write_run(settings, "long", steps)
    table = store.read_step_table(run_dir)
    points = store.history(table)
    assert len(points) <= store.MAX_HISTORY_POINTS
    assert len(points) >= store.MAX_HISTORY_POINTS - 4
    assert points[0].step == 1 and points[-1].step == steps
    assert [p.step for p in points] == sorted({p.step for p in points})
    # The dip at steps//3 is the global minimum of the reward: a min/max downsample keeps it.
    assert steps // 3 in {p.step for p in points}
    best = max(range(1, steps + 1), key=lambda s: reward_at(s, steps))
    assert best in {p.step for p in points}
    dip = next(p for p in points if p.step == steps // 3)
    assert dip.reward_mean == reward_at(steps // 3, steps) and dip.loss == loss_at(steps // 3)


def test_downsample_short_series_is_untouched() -> None:
    points = [(s, float(s)) for s in range(1, 11)]
    assert store.downsample_steps(points) == list(range(1, 11))
    assert store.downsample_steps([]) == []


def test_weights_prefer_the_last_sampler_checkpoint(tmp_path: Path) -> None:
    lines = [
        {"step": 5, "kind": "sampler", "path": "tinker://m/sampler_weights/step_5", "time": 1.0, "final": False},
        {"step": 5, "kind": "state", "path": "tinker://m/weights/step_5", "time": 1.0, "final": False},
        {"step": 10, "kind": "sampler", "path": "tinker://m/sampler_weights/step_10", "time": 2.0, "final": True},
        "half a li",
    ]
    (tmp_path / "checkpoints.jsonl").write_text(
        "".join((json.dumps(x) if isinstance(x, dict) else x) + "\n" for x in lines)
    )
    info = store.weights_info(store.read_checkpoints(tmp_path), None)
    assert info.sampler_weights == "tinker://m/sampler_weights/step_10" and info.sampler_step == 10
    assert info.final and info.sampler_exists is None
    assert info.resume_checkpoint == "tinker://m/weights/step_5" and info.resume_step == 5
    assert info.checkpoints_saved == 3


def test_trainer_status_half_written_reads_as_absent(tmp_path: Path) -> None:
    (tmp_path / "trainer_status.json").write_text('{"phase": "trai')
    assert store.read_trainer_status(tmp_path) is None
    (tmp_path / "trainer_status.json").write_text('{"phase": "training", "step": 3, "new_key": 1}')
    status = store.read_trainer_status(tmp_path)
    assert status is not None and status.phase == "training" and status.step == 3


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def test_plot_png_decodes_with_the_expected_size(settings: Settings) -> None:
    run_dir = write_run(settings, "plot", 2000, env_metrics=True)
    data = render_png(store.read_step_table(run_dir), "run plot")
    assert png_size(data) == (WIDTH_PX, HEIGHT_PX)
    import io

    from PIL import Image

    image = Image.open(io.BytesIO(data))
    image.load()  # decodes every pixel: a truncated or corrupt PNG raises here
    assert image.size == (WIDTH_PX, HEIGHT_PX)
    # Something was drawn: a blank canvas has a single colour.
    assert len(image.convert("RGB").getcolors(maxcolors=1 << 16) or []) > 10


def test_plot_without_steps_is_a_placeholder_of_the_same_size(tmp_path: Path) -> None:
    data = render_png(store.read_step_table(tmp_path), "empty")
    assert png_size(data) == (WIDTH_PX, HEIGHT_PX)


def test_env_metrics_merge_later_env_line_wins_but_never_over_the_trainer(tmp_path: Path) -> None:
    (tmp_path / "metrics.jsonl").write_text(json.dumps({"step": 1, "reward/mean": 0.1, "train/x": 1.0}) + "\n")
    env_lines = [
        {"step": 1, "train/percent_correct": 0.2, "train/x": 9.0},
        {"step": 1, "train/percent_correct": 0.4},
        {"step": 3, "eval/percent_correct": 0.5},
    ]
    (tmp_path / "env_metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in env_lines))
    table = store.read_step_table(tmp_path)
    assert table.series("train/percent_correct") == [(1, 0.4)]
    assert table.series("train/x") == [(1, 1.0)]
    assert table.series("eval/percent_correct") == [(3, 0.5)] and table.last_step == 3
    assert table.trainer_last_step == 1
