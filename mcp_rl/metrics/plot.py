"""The reward curve (and loss) of a run as a PNG, drawn from its metrics.

matplotlib is imported inside the function, with the Agg backend, so neither the server's
start-up nor a headless machine pays for it until a plot is asked for.
"""

from __future__ import annotations

import io
import textwrap
from collections.abc import Sequence

from mcp_rl.metrics.store import StepTable
from mcp_rl.rundir import (
    COST_TOTAL_USD_KEY,
    EVAL_PERCENT_CORRECT_KEY,
    EVAL_SCORE_KEY,
    LOSS_KEY,
    PERCENT_CORRECT_KEY,
    REWARD_KEY,
)

WIDTH_PX = 800
HEIGHT_PX = 500
DPI = 100
# Enough points for a faithful line at 800 px; longer runs are thinned evenly.
MAX_PLOT_POINTS = 4000
# eval/score: the trainer's held-out evaluations (step 0 = the base model), drawn with markers.
_ACCURACY_KEYS = (PERCENT_CORRECT_KEY, EVAL_PERCENT_CORRECT_KEY, EVAL_SCORE_KEY)


def _thin(points: Sequence[tuple[int, float]], limit: int = MAX_PLOT_POINTS) -> list[tuple[int, float]]:
    if len(points) <= limit:
        return list(points)
    stride = len(points) / (limit - 1)
    picked = [points[round(i * stride)] for i in range(limit - 1)]
    return [*picked, points[-1]]


def render_png(table: StepTable, title: str, caption: str | None = None) -> bytes:
    """A WIDTH_PX x HEIGHT_PX PNG: reward (and accuracy, if logged) on top, loss below;
    `caption` (the held-out comparison's sentence) under the title.

    With no steps logged yet the image says so instead of failing, so a client can show it
    from the first moment of a run.
    """
    # matplotlib is heavy (~0.5 s): only a plot request loads it, not the server's start-up
    import matplotlib

    matplotlib.use("Agg", force=True)
    from matplotlib.figure import Figure  # a bare Figure: no pyplot global state between calls

    fig = Figure(figsize=(WIDTH_PX / DPI, HEIGHT_PX / DPI), dpi=DPI)
    reward = _thin(table.series(REWARD_KEY))
    loss = _thin(table.series(LOSS_KEY))
    accuracy = {key: _thin(table.series(key)) for key in _ACCURACY_KEYS}
    if not reward and not loss:
        ax = fig.subplots()
        ax.set_axis_off()
        ax.text(0.5, 0.5, "no training steps logged yet", ha="center", va="center", fontsize=14)
        fig.suptitle(title)
    else:
        top, bottom = fig.subplots(2, 1, sharex=True)
        if reward:
            top.plot(*zip(*reward, strict=True), color="tab:blue", linewidth=1.2, label=REWARD_KEY)
        for (key, points), color in zip(accuracy.items(), ("tab:green", "tab:purple", "tab:orange"), strict=True):
            if points:
                marker = "o" if key == EVAL_SCORE_KEY else None
                top.plot(*zip(*points, strict=True), color=color, linewidth=1.0, label=key, marker=marker)
        top.set_ylabel("reward / accuracy")
        top.grid(True, alpha=0.3)
        top.legend(loc="best", fontsize=8)
        if loss:
            bottom.plot(*zip(*loss, strict=True), color="tab:red", linewidth=1.0, label=LOSS_KEY)
            bottom.legend(loc="best", fontsize=8)
        bottom.set_ylabel("loss")
        # A paid run: its estimated spend so far, on its own axis beside the loss.
        spend = _thin(table.series(COST_TOTAL_USD_KEY))
        if any(value > 0 for _, value in spend):
            usd_axis = bottom.twinx()
            usd_axis.plot(*zip(*spend, strict=True), color="tab:gray", linestyle="--", label="USD so far (estimated)")
            usd_axis.set_ylabel("USD (estimated)")
            usd_axis.legend(loc="upper left", fontsize=8)
        bottom.set_xlabel("step")
        bottom.grid(True, alpha=0.3)
        fig.suptitle(title if caption is None else f"{title}\n{textwrap.fill(caption, 120)}", fontsize=9)
    fig.tight_layout()
    buffer = io.BytesIO()
    # No bbox_inches="tight": that would change the pixel size from one run to the next.
    fig.savefig(buffer, format="png", dpi=DPI)
    return buffer.getvalue()
