"""Checking an MCP task file before training (rl_validate_environment on an `*.mcp.yaml`).

The file loads (a bad field is named), the server starts and lists its tools, the allowed tools
exist, each offered tool's schema renders (as JSON, and through the base model's chat template
or the fallback when a tokenizer is given), and each scenario's reward runs on its reference
answer (a check that raises or returns a non-score is reported with the scenario's line).
Degenerate final answers (an empty one, the prompt echoed, the most common expected answer,
every expected answer joined, a digit string) are scored with the task's own reward
(mcp_family/probes.py) and warned past degenerate_probes' thresholds.
Warnings: tools withheld for their destructiveHint/openWorldHint, variables the task names that
are not set (the server would start without them) or that are mcp-rl's own keys (never passed).

Run as a child of the validator (`mcp_rl.environments.validate.validate_mcp_task`):

    python -m mcp_rl.environments.mcp_family.validate TASK_FILE [--tokenizer DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio

from mcp_rl.environments.child import take_channels, write_report
from mcp_rl.environments.mcp_family.probes import NOT_PROBED, probe
from mcp_rl.environments.mcp_family.server import ToolServerError, UnknownTools, open_server
from mcp_rl.environments.mcp_family.taskfile import McpTask, TaskFileError, load
from mcp_rl.environments.mcp_family.tools import Renderer, ToolSpec
from mcp_rl.settings import SECRET_ENV_VARS


@dataclass(frozen=True)
class Problem:
    check: str  # taskfile | server | tools | schema | reference
    message: str

    def __str__(self) -> str:
        return self.message


@dataclass
class ValidationReport:
    offered: list[str] = field(default_factory=list)
    listed: list[str] = field(default_factory=list)
    withheld: dict[str, list[str]] = field(default_factory=dict)  # tool -> the hints that keep it out
    problems: list[Problem] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)
    degenerate_replies: list[dict[str, Any]] | None = None

    @property
    def ok(self) -> bool:
        return not self.problems

    def problem(self, check: str, message: str) -> None:
        self.problems.append(Problem(check, message))

    def data(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "kind": "mcp",
            "problems": [{"check": p.check, "message": p.message} for p in self.problems],
            "warnings": self.warnings,
            "degenerate_replies": self.degenerate_replies,
            "mcp": {"listed": self.listed, "offered": self.offered, "withheld": self.withheld, **self.facts},
        }


def _variables(task: McpTask, report: ValidationReport, env: Mapping[str, str]) -> None:
    spec = task.spec.server
    named = [*spec.env_vars, *([spec.auth_env_var] if spec.auth_env_var else [])]
    ours = [n for n in named if n in SECRET_ENV_VARS]
    if ours:
        report.warnings.append(
            f"server.env_vars names {ours}: mcp-rl's own keys never reach a server; if the server needs a key, "
            "put it in a variable of its own and name that one"
        )
    unset = [n for n in named if n not in ours and n not in env]
    if unset:
        report.warnings.append(
            f"{unset} named in server.env_vars/auth_env_var are not set in mcp-rl's environment: the server starts "
            "without them (set them where mcp-rl is started)"
        )


def _render(report: ValidationReport, tools: list[ToolSpec], tokenizer: Any) -> None:
    for tool in tools:
        try:
            json.dumps(tool.openai())
        except (TypeError, ValueError) as exc:
            report.problem("schema", f"the schema of tool {tool.name} does not render as JSON: {exc}")
            continue
        if tool.parameters.get("type") != "object":
            report.warnings.append(f"tool {tool.name}'s input schema is not of type object: calls may be refused")
    if tokenizer is None or report.problems:
        return
    try:
        renderer = Renderer(tokenizer, tools)
        text = renderer.render(renderer.first_messages("(validation)"), generation=True)
    except Exception as exc:  # the template's error, with the tools it was given
        report.problem("schema", f"the tools do not render through the model's chat template: {exc}")
        return
    missing = [t.name for t in tools if t.name not in text]
    if missing:
        report.problem("schema", f"the rendered prompt does not show the tools {missing}")
    report.facts["rendering"] = "chat template" if renderer.uses_template else "fallback (tools in the system prompt)"
    report.facts["tools_prompt_tokens"] = len(tokenizer.encode(text, add_special_tokens=False))


async def validate(task: McpTask, env: Mapping[str, str] | None = None, tokenizer: Any = None) -> ValidationReport:
    report = ValidationReport()
    source = dict(os.environ) if env is None else dict(env)
    _variables(task, report, source)
    report.facts["train_scenarios"] = len(task.train)
    report.facts["held_out_scenarios"] = len(task.held_out)
    began = time.monotonic()
    try:
        async with open_server(task, source) as server:
            report.listed = [t.name for t in server.listed]
            report.offered = [t.name for t in server.tools]
            report.withheld = {
                t.name: hints for t in server.listed if (hints := _hints(t)) and t.name not in report.offered
            }
            _render(report, list(server.tools), tokenizer)
    except UnknownTools as exc:
        report.problem("tools", str(exc))
        return report
    except ToolServerError as exc:
        report.problem("server", str(exc))
        return report
    report.facts["server_seconds"] = round(time.monotonic() - began, 2)
    for name, hints in report.withheld.items():
        report.warnings.append(
            f"tool {name} declares {' and '.join(hints)}: not offered (name it in tools: to offer it)"
        )
    if not report.offered:
        report.problem("tools", "the server offers no tool the task allows (name them in `tools:`)")
    references = 0
    for scenario in (*task.train, *task.held_out):
        if scenario.answer is None or task.spec.reward.kind in NOT_PROBED:
            continue  # a read-back or judge scores after the episode: an answer alone has no score (0 here)
        references += 1
        try:
            score = task.reward(scenario.answer, scenario, [])
        except Exception as exc:  # the user's check: any error is theirs to see, with the line
            report.problem(
                "reference",
                f"{task.spec.scenarios}:{scenario.line}: the reward raised on the reference answer: "
                f"{type(exc).__name__}: {exc}",
            )
            continue
        if score < 1.0 and task.check_fn is None:
            report.problem("reference", f"{task.spec.scenarios}:{scenario.line}: the reference answer scores {score}")
    report.facts["references_scored"] = references
    if any(p.check == "reference" for p in report.problems):
        report.facts["degenerate_probes"] = {"scenarios_probed": 0, "not_probed": "fix the reference problems first"}
        return report
    probed = probe(task)
    report.degenerate_replies = probed.rows()
    report.facts["degenerate_probes"] = probed.facts
    report.warnings.extend(probed.warnings)
    return report


def _hints(tool: Any) -> list[str]:
    notes = tool.annotations
    if notes is None:
        return []
    return [
        h for h, on in (("destructiveHint", notes.destructive_hint), ("openWorldHint", notes.open_world_hint)) if on
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("task_file")
    parser.add_argument("--tokenizer", default=None)
    ns = parser.parse_args(argv)
    take_channels()
    try:
        task = load(ns.task_file)
    except TaskFileError as exc:
        write_report({"ok": False, "kind": "mcp", "problems": [{"check": "taskfile", "message": str(exc)}]})
        return 0
    tokenizer = None
    warnings: list[str] = []
    if ns.tokenizer:
        try:
            from transformers import AutoTokenizer  # only here: the child renders with the base model's

            tokenizer = AutoTokenizer.from_pretrained(ns.tokenizer)
        except Exception as exc:  # not the task's fault: said, not counted
            warnings.append(f"the base model's tokenizer could not be loaded ({type(exc).__name__}: {exc})")
    report = anyio.run(lambda: validate(task, tokenizer=tokenizer))
    report.warnings += warnings
    data = report.data()
    data["train_items"], data["held_out_items"] = len(task.train), len(task.held_out)
    data["references_scored"] = report.facts.get("references_scored")
    write_report(data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
