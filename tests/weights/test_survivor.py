"""What rl_stop_training and rl_get_results say about the checkpoint that survived."""

from __future__ import annotations

import time

from mcp_rl.metrics.store import survivor_note
from mcp_rl.rundir import CheckpointRecord


def test_an_expiring_last_checkpoint_says_when_and_how_to_keep_it() -> None:
    soon = time.time() + 5 * 3600
    note = survivor_note(
        [
            CheckpointRecord(step=2, kind="state", path="tinker://r/weights/a", expires_at=soon),
            CheckpointRecord(step=2, kind="sampler", path="tinker://r/sampler_weights/a", expires_at=soon),
        ]
    )
    assert note is not None and "expires in 5 h" in note and "rl_keep_checkpoint" in note and "step=2" in note


def test_a_kept_or_final_last_checkpoint_never_expires() -> None:
    records = [
        CheckpointRecord(step=2, kind="state", path="tinker://r/weights/a", expires_at=time.time() + 3600),
        CheckpointRecord(step=4, kind="state", path="tinker://r/weights/b", kept=True),
        CheckpointRecord(step=4, kind="sampler", path="tinker://r/sampler_weights/b", kept=True),
    ]
    note = survivor_note(records)
    assert note is not None and note.startswith("step 4 survives") and "never expires" in note
    # a later TTL line for the same path wins
    records.append(CheckpointRecord(step=4, kind="state", path="tinker://r/weights/b", expires_at=time.time() + 7200))
    assert "expires in 2 h" in (survivor_note(records) or "")
    assert survivor_note([]) is None
