"""Reading what the model said during training (rollouts.jsonl, written by the trainer), a page
at a time (issue 34)."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field

from mcp_rl.errors import UnknownId, clip
from mcp_rl.rundir import ROLLOUTS_FILE, RUN_FILE, RolloutGroup, is_run_id, read_rollouts
from mcp_rl.settings import Settings
from mcp_rl.supervisor.results import _registry_record, run_dir_of

MAX_PAGE = 10


class RolloutPage(BaseModel):
    """rl_get_rollouts' answer."""

    run_id: str
    step: int | None = Field(description="The step shown (None: no rollouts kept yet).")
    steps_kept: int = Field(description="Steps with rollouts kept.")
    first_step: int | None = None
    last_step: int | None = None
    groups: list[RolloutGroup] = Field(
        description="Groups of that step: the prompt, each answer with its reward and the advantage it was trained "
        "with (0: not trained on). `signal` false: every answer got the same reward."
    )
    offset: int
    next_offset: int | None = Field(None, description="Pass as offset for the next page of this step's groups.")
    total: int = Field(description="Groups kept for this step.")
    message: str


def rollout_page(settings: Settings, run_id: str, step: int | None, offset: int, limit: int) -> RolloutPage:
    """The kept groups of `step` (None: the latest step with any), `limit` from `offset`."""
    record = _registry_record(settings, run_id) if is_run_id(run_id) else None
    run_dir = Path(record.run_dir) if record is not None else run_dir_of(settings, run_id)
    if not is_run_id(run_id) or (record is None and not (run_dir / RUN_FILE).exists()):
        raise UnknownId(
            f"Unknown run_id {clip(run_id)}; call rl_list_runs to see the runs there are.", "run_id", run_id
        )
    groups = read_rollouts(run_dir / ROLLOUTS_FILE)
    steps = sorted({g.step for g in groups})
    if not steps:
        return RolloutPage(
            run_id=run_id,
            step=None,
            steps_kept=0,
            groups=[],
            offset=offset,
            total=0,
            message="No rollouts kept yet: the trainer keeps a few groups after each step it trains.",
        )
    shown = steps[-1] if step is None else step
    of_step = [g for g in groups if g.step == shown]
    page = of_step[offset : offset + limit]
    next_offset = offset + limit if offset + limit < len(of_step) else None
    if not of_step:
        message = f"No rollouts kept for step {shown}; steps {steps[0]}-{steps[-1]} have some ({len(steps)} steps)."
    else:
        with_signal = sum(g.signal for g in of_step)
        message = (
            f"Step {shown}: {len(of_step)} groups kept ({with_signal} with different rewards), showing "
            f"{len(page)} from {offset}." + (f" Next page: offset={next_offset}." if next_offset is not None else "")
        )
    return RolloutPage(
        run_id=run_id,
        step=shown,
        steps_kept=len(steps),
        first_step=steps[0],
        last_step=steps[-1],
        groups=page,
        offset=offset,
        next_offset=next_offset,
        total=len(of_step),
        message=message,
    )
