"""What the model said during training, kept to read (issue 34): a few groups per step.

After each step the trainer appends up to ROLLOUT_GROUPS_PER_STEP groups of its batch to
`rollouts.jsonl` (format: mcp_rl.rundir.RolloutGroup): the prompt, each answer with its reward and
the advantage the update gave it (and an MCP task's judge verdict: its prompt, scores, reasons). One group with signal (different rewards) and one without are
preferred, so both what is learned from and what is not can be read. Bounded: answers per group
and characters per text are capped.
"""

from __future__ import annotations

from typing import Any

from mcp_rl.rundir import (
    ROLLOUT_ANSWERS_PER_GROUP,
    ROLLOUT_GROUPS_PER_STEP,
    ROLLOUT_TEXT_CHARS,
    RolloutAnswer,
    RolloutGroup,
    clip_text,
)
from mcp_rl.trainer.backends.base import TrainingExample


def _content(message: Any) -> str:
    if isinstance(message, dict):
        content = message.get("content")
        return content if isinstance(content, str) else str(content or "")
    return str(message)


def _advantage(example: TrainingExample) -> float:
    trained = [a for a, t in zip(example.advantages, example.trained, strict=True) if t]
    return round(sum(trained) / len(trained), 6) if trained else 0.0


def _texts(group: dict[str, Any], n: int) -> tuple[str, list[str]]:
    """The prompt and each answer's text, from the group's messages (Atropos' `messages`)."""
    messages = group.get("messages")
    if not isinstance(messages, list) or len(messages) != n or not all(isinstance(m, list) and m for m in messages):
        lengths = [len(t) for t in group.get("tokens") or []]
        return "(the environment sent no messages with this group)", [f"({k} tokens, no text sent)" for k in lengths]
    prompt = "\n".join(f"{m.get('role', '?') if isinstance(m, dict) else '?'}: {_content(m)}" for m in messages[0][:-1])
    return clip_text(prompt, ROLLOUT_TEXT_CHARS * 2), [clip_text(_content(m[-1])) for m in messages]


def rollout_groups(step: int, batch: list[dict[str, Any]], examples: list[TrainingExample]) -> list[RolloutGroup]:
    """The groups of a step to keep: `examples` are the step's sequences in batch order."""
    spans = []
    start = 0
    for group in batch:
        n = len(group.get("tokens") or [])
        spans.append((start, n))
        start += n
    if start != len(examples):
        return []  # not one example per sequence: nothing is kept rather than mismatched answers
    signal = [len({float(s) for s in group.get("scores") or []}) > 1 for group in batch]
    with_signal = [i for i, s in enumerate(signal) if s]
    without = [i for i, s in enumerate(signal) if not s]
    chosen = (with_signal[:1] + without[:1] + with_signal[1:] + without[1:])[:ROLLOUT_GROUPS_PER_STEP]
    kept = []
    for g in sorted(chosen):
        group = batch[g]
        first, n = spans[g]
        prompt, texts = _texts(group, n)
        scores = [float(s) for s in group.get("scores") or []]
        answers = [
            RolloutAnswer(text=texts[i], reward=scores[i], advantage=_advantage(examples[first + i]))
            for i in range(min(n, ROLLOUT_ANSWERS_PER_GROUP, len(scores)))
        ]
        overrides = group.get("group_overrides")
        judge = overrides.get("judge") if isinstance(overrides, dict) else None
        kept.append(
            RolloutGroup(
                step=step,
                group=g,
                prompt=prompt,
                answers=answers,
                answers_total=n,
                signal=signal[g],
                judge=judge if isinstance(judge, dict) else None,
            )
        )
    return kept
