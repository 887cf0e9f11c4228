"""Checking a task file before training: the server starts and lists its tools, the allowed tools
exist and each offered tool's schema renders, and each scenario's reward runs on its reference
answer (a check that raises or returns a non-score is reported with the scenario's line)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field

from mcp_rl.environments.mcp_family.server import ToolServerError, open_server
from mcp_rl.environments.mcp_family.taskfile import McpTask


@dataclass
class ValidationReport:
    offered: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


async def validate(task: McpTask, env: Mapping[str, str] | None = None) -> ValidationReport:
    report = ValidationReport()
    try:
        async with open_server(task, env) as server:
            for tool in server.tools:
                try:
                    json.dumps(tool.openai())
                except (TypeError, ValueError) as exc:
                    report.problems.append(f"the schema of tool {tool.name} does not render as JSON: {exc}")
            report.offered = [t.name for t in server.tools]
    except ToolServerError as exc:
        report.problems.append(str(exc))
        return report
    if not report.offered:
        report.problems.append("the server offers no tool the task allows (name them in `tools:`)")
    for scenario in (*task.train, *task.held_out):
        if scenario.answer is None:
            continue
        try:
            task.reward(scenario.answer, scenario, [])
        except Exception as exc:  # the user's check: any error is theirs to see, with the line
            report.problems.append(
                f"{task.spec.scenarios}:{scenario.line}: the reward raised on the reference answer: "
                f"{type(exc).__name__}: {exc}"
            )
    return report
