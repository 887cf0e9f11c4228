"""What degenerate final answers earn on an MCP task file (the validator's probes, issue 47).

A reward that pays "the reply contains the expected answer" also pays a reply listing many
answers: every scenario's answer joined in one reply scores 1 everywhere, and GRPO learns that
list instead of the tools. So the validator scores, with the task's own reward (`McpTask.reward`,
the code the episodes call, a Python check included, run in the validator's child) and an empty
trace (no tool call), over at most PROBED_SCENARIOS scenarios (held-out first) the final answers

    empty        ""
    echo         the scenario's prompt
    constant     the most common expected answer of the task, given to every scenario
    all_answers  every distinct expected answer of the task, joined in one reply
    digits       a long digit string (degenerate_probes.DIGITS)

and warns past the thresholds of mcp_rl.environments.degenerate_probes (the one place they are
kept). A read-back reward scores the server's state after an episode and a judge compares each
group's episodes: neither has a score for a final answer alone, so neither is probed (said why).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mcp_rl.environments import degenerate_probes as dp
from mcp_rl.environments.mcp_family.taskfile import McpTask, RewardKind, Scenario

PROBED_SCENARIOS = 50
PROBES = ("empty", "echo", "constant", dp.ALL_ANSWERS, "digits")
ANSWER_SEPARATOR = ", "
ADVICE = (
    "Use reward.kind exact or normalised (the answer alone), or a check that refuses a reply naming several "
    "answers (e.g. 0 unless the reply, normalised, equals the expected answer)."
)
NOT_PROBED = {
    RewardKind.READ_BACK: "reward.kind read_back scores the server's state with a tool call after the episode, not "
    "the final answer: it cannot be probed without playing episodes against the server. Check that expect_field "
    "asks for what only the right actions leave (a state every episode reaches pays a constant).",
    RewardKind.JUDGE: "reward.kind judge scores each group's episodes relative to each other through the judge model: "
    "it cannot be probed offline. Read the judge's reasons in rl_get_rollouts after a smoke test, and say in the "
    "rubric that a reply listing several answers is wrong.",
}


@dataclass
class Probed:
    results: list[dp.ProbeResult] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)  # how many scenarios, or why none

    def rows(self) -> list[dict[str, Any]] | None:
        return [r.report() for r in self.results] if self.results else None


def _reply(probe: str, scenario: Scenario, constant: str | None, every: str | None) -> str:
    if probe == dp.ALL_ANSWERS:
        return every or ""
    return dp.reply_for(probe, scenario.prompt, constant)


def probe(task: McpTask) -> Probed:
    """Each probe's mean over the probed scenarios, and the warnings past the thresholds. A check
    that raises on a probe's reply leaves that probe out, with a warning (in an episode that
    raise drops the episode: the reply is not scored 0)."""
    out = Probed()
    kind = task.spec.reward.kind
    if kind in NOT_PROBED:
        out.facts = {"scenarios_probed": 0, "not_probed": NOT_PROBED[kind]}
        return out
    scenarios = [*task.held_out, *task.train]
    if kind is not RewardKind.CHECK:  # a check may score from any field of the line; the others need the answer
        scenarios = [s for s in scenarios if s.answer is not None]
    sample = scenarios[:PROBED_SCENARIOS]
    if not sample:
        out.facts = {"scenarios_probed": 0, "not_probed": "no scenario has an expected answer"}
        return out
    answers = [s.answer for s in sorted((*task.train, *task.held_out), key=lambda s: s.line)]  # the file's order
    constant = dp.most_common(answers)
    distinct = list(dict.fromkeys(a.strip() for a in answers if a is not None and a.strip()))
    every = ANSWER_SEPARATOR.join(distinct) if len(distinct) > 1 else None
    out.facts = {
        "scenarios_probed": len(sample),
        "scenarios": len(task.train) + len(task.held_out),
        "distinct_answers": len(distinct),
        "trace": "empty (no tool call)",
    }
    for name in PROBES:
        if (name == "constant" and constant is None) or (name == dp.ALL_ANSWERS and every is None):
            continue  # no expected answers (a check's own data), or one: the constant says it
        scores: list[float] = []
        for scenario in sample:
            try:
                scores.append(task.reward(_reply(name, scenario, constant, every), scenario, []))
            except Exception as exc:  # the user's check, on a reply a model can give
                out.warnings.append(
                    f"the reward raised on {dp.DESCRIBED[name]} ({task.spec.scenarios}:{scenario.line}): "
                    f"{type(exc).__name__}: {exc}"[:300]
                    + "; in training such an episode is dropped, not scored: return 0 for a reply that is not an answer"
                )
                break
        else:
            shown = "(each scenario's own prompt)" if name == "echo" else _reply(name, sample[0], constant, every)
            out.results.append(dp.result(name, shown, scores))
    out.warnings.extend(dp.warnings(out.results, advice=ADVICE))
    return out
