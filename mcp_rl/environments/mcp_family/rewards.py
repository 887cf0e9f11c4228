"""The read-back reward: a state-based check after the episode (issue 47).

The episode's last act is not the policy's: on the same server session, before it closes, the
task's `read_back` tool is called (e.g. server-memory's `read_graph`) and its result compared
with what the scenario expects (`expect_field` of its JSONL line). What the policy *did* to the
server is scored, not what it says it did. The call and its outcome are kept on the trajectory.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import anyio
from mcp.types import TextContent

from mcp_rl.environments.mcp_family.taskfile import ReadBackMatch, ReadBackSpec, Scenario, normalise

# The read-back result is compared whole (the policy's view of a result is capped, not this).
READ_BACK_BYTES = 1_000_000
READ_BACK_KEPT_CHARS = 2000  # of the result, on the trajectory (for reading, not scoring)


@dataclass(frozen=True)
class ReadBack:
    tool: str
    result: str  # (its first READ_BACK_KEPT_CHARS characters)
    score: float
    reason: str

    def record(self) -> dict[str, Any]:
        return {"tool": self.tool, "result": self.result, "score": self.score, "reason": self.reason}


def _contains(result: str, expected: Any) -> tuple[float, str]:
    wanted = [expected] if isinstance(expected, str) else expected
    if not isinstance(wanted, list) or not wanted or not all(isinstance(w, str) for w in wanted):
        return 0.0, "expect_field must hold a string or a list of strings for match: contains"
    text = normalise(result)
    missing = [w for w in wanted if normalise(w) not in text]
    found = len(wanted) - len(missing)
    reason = f"{found} of {len(wanted)} expected found" + (f"; missing {missing[:5]}" if missing else "")
    return found / len(wanted), reason


def json_holds(actual: Any, expected: Any) -> bool:
    """`expected` is in `actual`: an object's keys each hold their value, a list's elements each
    are held by some element, strings equal once normalised, other values equal."""
    if isinstance(expected, dict):
        return isinstance(actual, dict) and all(k in actual and json_holds(actual[k], v) for k, v in expected.items())
    if isinstance(expected, list):
        return isinstance(actual, list) and all(any(json_holds(a, e) for a in actual) for e in expected)
    if isinstance(expected, str):
        return isinstance(actual, str) and normalise(actual) == normalise(expected)
    return bool(actual == expected and type(actual) is type(expected))


def _json_subset(result: str, expected: Any) -> tuple[float, str]:
    try:
        actual = json.loads(result)
    except ValueError:
        return 0.0, "the read-back result is not JSON"
    if json_holds(actual, expected):
        return 1.0, "the result holds the expected JSON"
    return 0.0, "the result does not hold the expected JSON"


def compare(spec: ReadBackSpec, result: str, scenario: Scenario) -> tuple[float, str]:
    expected = scenario.data.get(spec.expect_field)
    if spec.match is ReadBackMatch.JSON_SUBSET:
        return _json_subset(result, expected)
    return _contains(result, expected)


async def read_back(session: Any, spec: ReadBackSpec, scenario: Scenario, timeout_s: float) -> ReadBack:
    """Call `spec.tool` on the episode's open `session` (an mcp ClientSession) and score it.
    A call that errors or times out scores 0, with the reason (the episode is not dropped)."""
    try:
        with anyio.fail_after(timeout_s):
            result = await session.call_tool(spec.tool, dict(spec.arguments), read_timeout_seconds=timeout_s)
    except TimeoutError:
        return ReadBack(spec.tool, "", 0.0, f"the read-back {spec.tool} did not answer within {timeout_s:g} s")
    except Exception as exc:  # an MCP error answer: the task's read-back is wrong, or the server broke
        return ReadBack(spec.tool, "", 0.0, f"the read-back {spec.tool} failed: {type(exc).__name__}: {exc}")
    text = "\n".join(b.text if isinstance(b, TextContent) else f"[{b.type} content]" for b in result.content)
    if not text and result.structured_content is not None:
        text = json.dumps(result.structured_content)
    text = text.encode("utf-8")[:READ_BACK_BYTES].decode("utf-8", errors="ignore")
    if result.is_error:
        return ReadBack(spec.tool, text[:READ_BACK_KEPT_CHARS], 0.0, f"the read-back {spec.tool} answered an error")
    score, reason = compare(spec, text, scenario)
    return ReadBack(spec.tool, text[:READ_BACK_KEPT_CHARS], score, reason)
