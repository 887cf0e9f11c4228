"""The MCP task file (`*.mcp.yaml`): the one owner of its format, its loading and its scenarios.

Only what the user knows::

    name: memory_recall
    server:
      command: npx                                    # a stdio server: command, args and the
      args: ["-y", "@modelcontextprotocol/server-memory@2025.11.25"]
      env_vars: [MEMORY_FILE_PATH]                    # the only variables it may receive
      # url: https://example.com/mcp                  # or a Streamable HTTP server
      # auth_env_var: EXAMPLE_TOKEN                   # sent as "Authorization: Bearer ..."
    scenarios: scenarios.jsonl                        # {"prompt": ..., "answer": ...} a line
    held_out_fraction: 0.2                            # split by the prompt's hash
    reward:
      kind: normalised                                # exact | normalised | contains | check | read_back | judge
      # check: |                                      # kind: check
      #   def check(answer, trace):                   # or check(answer, trace, scenario)
      #       return 1.0 if any(c["name"] == "read_graph" for c in trace) else 0.0
    tools: [create_entities, read_graph]              # allowed tools (default: the safe ones)
    limits: {max_turns: 6, max_tool_calls: 8, call_timeout_s: 10, output_bytes: 2000,
             max_tokens_per_turn: 128}
    # system_prompt: ...                              # before the tools' listing
    # first_turn_prefill: '<tool_call>{"name": "read_graph"'   # small models: start with a call
    # read_back: {tool: read_graph, arguments: {}, expect_field: expected_state, match: contains}
    # judge: {model: openai/gpt-4o-mini, max_cost_usd: 2.0, rubric: "..."}   # reward.kind: judge

A scenario's split depends only on its prompt (sha256), so it never moves between training and
held-out whatever lines are added or reordered. The check's source is compiled at load (a syntax
error or a missing `check` is reported with the file) and runs in the environment's process. A
check taking a third parameter receives the scenario: a read-only mapping of its JSONL line (its
`answer` and any other field), so a check can compare against per-scenario data.
"""

from __future__ import annotations

import copy
import hashlib
import inspect
import json
import math
import re
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from types import MappingProxyType
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from mcp_rl.errors import UserError
from mcp_rl.settings import SECRET_ENV_VARS

TASK_FILE_SUFFIX = ".mcp.yaml"
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class ServerSpec(BaseModel):
    """Where the tools are: a stdio command (a fresh process per episode) or a Streamable HTTP URL."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    command: str | None = Field(None, description="The stdio server's program, e.g. npx or uvx.")
    args: list[str] = Field(default_factory=list, description="Its arguments.")
    env_vars: list[str] = Field(
        default_factory=list, description="Names of the variables the server may receive (besides PATH, HOME, LANG)."
    )
    cwd: str | None = Field(None, description="Working folder of the server (relative: to the task file).")
    url: str | None = Field(None, description="A Streamable HTTP server's endpoint instead of a command.")
    auth_env_var: str | None = Field(
        None, description="The variable whose value is sent as the HTTP server's bearer token."
    )

    @field_validator("env_vars")
    @classmethod
    def _names(cls, names: list[str]) -> list[str]:
        bad = [n for n in names if not _ENV_NAME.match(n)]
        if bad:
            raise ValueError(f"not environment variable names: {bad}")
        return names

    @model_validator(mode="after")
    def _one_transport(self) -> ServerSpec:
        if (self.command is None) == (self.url is None):
            raise ValueError("give exactly one of server.command (stdio) and server.url (Streamable HTTP)")
        if self.url is not None and not re.match(r"^https?://", self.url):
            raise ValueError(f"server.url must be an http(s) URL, not {self.url!r}")
        return self


class Limits(BaseModel):
    """Every episode is bounded in turns, calls, time and bytes."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    max_turns: int = Field(6, ge=1, le=100, description="Policy turns per episode.")
    max_tool_calls: int = Field(8, ge=0, le=1000, description="Tool calls per episode (malformed ones count).")
    call_timeout_s: float = Field(10.0, gt=0, le=600, description="Seconds one tool call may take.")
    output_bytes: int = Field(2000, ge=64, le=1_000_000, description="Bytes of a tool's result the model sees.")
    max_tokens_per_turn: int = Field(128, ge=1, le=32768, description="Tokens the policy samples per turn.")
    episode_timeout_s: float = Field(120.0, gt=0, le=3600, description="Seconds one whole episode may take.")


class RewardKind(StrEnum):
    EXACT = "exact"
    NORMALISED = "normalised"
    # The normalised answer appears in the normalised reply, not inside a longer word or number
    # ("K7" in "<tool_response>K7</tool_response>", not in "K72"): for models that wrap or explain.
    CONTAINS = "contains"
    CHECK = "check"
    READ_BACK = "read_back"  # a tool call after the episode, its result compared (rewards.py)
    JUDGE = "judge"  # a model scores each group's episodes relative to each other (judge.py)


# The judge's default rubric (RULER's spirit: relative, goal first, then efficiency); the task
# file's `judge.rubric` replaces it.
DEFAULT_RUBRIC = """\
- A trajectory that achieves the user's goal scores higher than one that does not.
- Among trajectories that achieve it, the one that does so with fewer, correct tool calls scores higher.
- A made-up fact scores lower than an honest "I could not find it".
- Malformed tool calls and ignored tool errors count against a trajectory."""
LOCAL_JUDGE = "local"


class ReadBackMatch(StrEnum):
    CONTAINS = "contains"  # each expected string (normalised) appears in the result: the share found
    JSON_SUBSET = "json_subset"  # the result is JSON holding the expected JSON (objects by key, lists by element)


class ReadBackSpec(BaseModel):
    """A state-based check: after the episode, on the same server session, one tool call whose
    result is compared to what the scenario expects (its `expect_field`)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    tool: str = Field(min_length=1, description="The tool to call after the episode (need not be offered).")
    arguments: dict[str, Any] = Field(default_factory=dict, description="Its arguments.")
    expect_field: str = Field(
        "expected_state", min_length=1, description="The scenario's JSONL key holding what the result must hold."
    )
    match: ReadBackMatch = ReadBackMatch.CONTAINS


class JudgeSpec(BaseModel):
    """A judge model that scores each group's episodes relative to each other, 0-1 (RULER-style)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    model: str = Field(min_length=1, description='An OpenRouter model id, or "local" (the policy\'s own server).')
    rubric: str = Field(DEFAULT_RUBRIC, min_length=1, description="What makes one trajectory better than another.")
    max_cost_usd: float | None = Field(
        None, gt=0, description="The judge's spending cap in USD (required for an OpenRouter model)."
    )
    max_tokens: int = Field(1024, ge=64, le=16384, description="Tokens the judge may answer with per group.")
    timeout_s: float = Field(60.0, gt=0, le=600, description="Seconds one judge request may take.")

    @model_validator(mode="after")
    def _capped(self) -> JudgeSpec:
        if self.model != LOCAL_JUDGE and self.max_cost_usd is None:
            raise ValueError(f"judge.max_cost_usd is required for the paid judge {self.model!r} (e.g. 2.0)")
        return self


class RewardSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    kind: RewardKind = RewardKind.NORMALISED
    check: str | None = Field(
        None,
        description="Python source defining check(answer, trace) or check(answer, trace, scenario) -> float in [0, 1].",
    )

    @model_validator(mode="after")
    def _check_given(self) -> RewardSpec:
        if (self.kind is RewardKind.CHECK) != (self.check is not None):
            raise ValueError("reward.check (Python source) is given exactly when reward.kind is check")
        return self


class TaskFileModel(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    name: str = Field(pattern=r"^[A-Za-z0-9_.-]{1,64}$")
    server: ServerSpec
    scenarios: str = Field(description="JSONL file of scenarios, relative to the task file.")
    held_out_fraction: float = Field(0.2, gt=0.0, lt=1.0)
    reward: RewardSpec = Field(default_factory=RewardSpec)
    tools: list[str] | None = Field(
        None, description="Tools offered by name (default: every tool not declared destructive or open-world)."
    )
    limits: Limits = Field(default_factory=Limits)
    system_prompt: str | None = None
    first_turn_prefill: str | None = Field(
        None,
        description="Text the first assistant turn starts with (part of the prompt, not trained), e.g. "
        '\'<tool_call>{"name": "search_nodes", "arguments": {"query": "\': lets a small model that never '
        "writes a call by itself start its episodes with one.",
    )
    read_back: ReadBackSpec | None = Field(None, description="The state check of reward.kind read_back.")
    judge: JudgeSpec | None = Field(None, description="The judge of reward.kind judge.")

    @model_validator(mode="after")
    def _reward_parts(self) -> TaskFileModel:
        kind = self.reward.kind
        if (kind is RewardKind.READ_BACK) != (self.read_back is not None):
            raise ValueError("read_back (tool, arguments, expect_field) is given exactly when reward.kind is read_back")
        if (kind is RewardKind.JUDGE) != (self.judge is not None):
            raise ValueError("judge (model, max_cost_usd, rubric) is given exactly when reward.kind is judge")
        return self


@dataclass(frozen=True)
class Scenario:
    prompt: str
    answer: str | None
    data: dict[str, Any]  # the whole JSONL line (check data beside prompt and answer)
    line: int


# The compiled check, called with the scenario whatever the user's arity (compile_check adapts it).
CheckFn = Callable[[str, list[dict[str, Any]], Scenario], Any]


@dataclass(frozen=True)
class McpTask:
    """A loaded task file: its settings, its scenarios split, and its reward."""

    path: Path
    spec: TaskFileModel
    train: tuple[Scenario, ...]
    held_out: tuple[Scenario, ...]
    check_fn: CheckFn | None

    @property
    def name(self) -> str:
        return self.spec.name

    def server_cwd(self) -> Path:
        cwd = self.spec.server.cwd
        return self.path.parent if cwd is None else (self.path.parent / cwd).resolve()

    def reward(self, answer: str | None, scenario: Scenario, trace: list[dict[str, Any]]) -> float:
        """The episode's reward in [0, 1]; no final answer (a limit ended it) scores 0 unless the
        check says otherwise. read_back and judge score later (after the episode, per group): 0 here."""
        kind = self.spec.reward.kind
        if kind in (RewardKind.READ_BACK, RewardKind.JUDGE):
            return 0.0
        if kind is RewardKind.CHECK:
            assert self.check_fn is not None
            return checked(self.check_fn(answer or "", trace, scenario), self.path)
        if answer is None or scenario.answer is None:
            return 0.0
        if kind is RewardKind.EXACT:
            return 1.0 if answer.strip() == scenario.answer.strip() else 0.0
        if kind is RewardKind.CONTAINS:
            return 1.0 if contains(answer, scenario.answer) else 0.0
        return 1.0 if normalise(answer) == normalise(scenario.answer) else 0.0


class TaskFileError(UserError):
    """A task file that cannot be used; the message names the file and what to fix."""


def normalise(text: str) -> str:
    """Case, accents' composition, surrounding quotes/punctuation and runs of spaces ignored."""
    text = unicodedata.normalize("NFKC", text).casefold().strip()
    text = re.sub(r"\s+", " ", text)
    return text.strip(" \t\"'`.,;:!?")


def contains(reply: str, expected: str) -> bool:
    """`expected`, normalised, appears in `reply`, normalised, with no letter or digit joined to
    either end (so "4" is not found in "14"). An expected answer that normalises to nothing is
    never found (it would be in every reply)."""
    wanted = normalise(expected)
    if not wanted:
        return False
    return re.search(rf"(?<!\w){re.escape(wanted)}(?!\w)", normalise(reply)) is not None


def checked(value: Any, where: Path) -> float:
    try:
        score = float(value)
    except (TypeError, ValueError):
        raise TaskFileError(f"{where}: check() returned {value!r}; it must return a number in [0, 1]") from None
    if not math.isfinite(score) or not 0.0 <= score <= 1.0:
        raise TaskFileError(f"{where}: check() returned {score!r}; it must return a number in [0, 1]")
    return score


def is_held_out(prompt: str, fraction: float) -> bool:
    """Deterministic by the prompt alone: the first 8 bytes of its sha256 as a fraction of 2**64."""
    digest = hashlib.sha256(prompt.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < fraction


def read_scenarios(path: Path) -> list[Scenario]:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise TaskFileError(f"scenarios file {path} cannot be read: {exc}") from None
    out: list[Scenario] = []
    seen: set[str] = set()
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except ValueError as exc:
            raise TaskFileError(f"{path}:{number}: not JSON ({exc})") from None
        if not isinstance(data, dict) or not isinstance(data.get("prompt"), str) or not data["prompt"].strip():
            raise TaskFileError(f"{path}:{number}: each line is an object with a non-empty string 'prompt'")
        answer = data.get("answer")
        if answer is not None and not isinstance(answer, str):
            raise TaskFileError(f"{path}:{number}: 'answer' must be a string when given")
        if data["prompt"] in seen:
            continue  # the same question twice would only weigh it double
        seen.add(data["prompt"])
        out.append(Scenario(prompt=data["prompt"], answer=answer, data=data, line=number))
    if not out:
        raise TaskFileError(f"scenarios file {path} holds no scenario")
    return out


def _takes_scenario(fn: Callable[..., Any], where: Path) -> bool:
    """True for check(answer, trace, scenario) (or *args), False for check(answer, trace)."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return False  # no signature to read (a builtin): called the documented 2-argument way
    if any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in params):
        return True
    positional = [
        p for p in params if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    ]
    required = [p for p in positional if p.default is inspect.Parameter.empty]
    if len(positional) < 2 or len(required) > 3:
        raise TaskFileError(
            f"{where}: reward.check must be check(answer, trace) or check(answer, trace, scenario); "
            f"it takes ({', '.join(p.name for p in params)})"
        )
    return len(positional) >= 3


def compile_check(source: str, where: Path) -> CheckFn:
    namespace: dict[str, Any] = {"__name__": f"mcp_task_check:{where.name}"}
    try:
        exec(compile(source, f"{where}:reward.check", "exec"), namespace)  # the user's own reward code
    except SyntaxError as exc:
        raise TaskFileError(f"{where}: reward.check does not compile: {exc}") from None
    fn = namespace.get("check")
    if not callable(fn):
        raise TaskFileError(f"{where}: reward.check must define a function check(answer, trace)")
    if not _takes_scenario(fn, where):
        return lambda answer, trace, _scenario: fn(answer, trace)

    def with_scenario(answer: str, trace: list[dict[str, Any]], scenario: Scenario) -> Any:
        # A copy behind a read-only view: the check cannot change the scenario another episode sees.
        return fn(answer, trace, MappingProxyType(copy.deepcopy(scenario.data)))

    return with_scenario


def _problem(exc: ValidationError) -> str:
    return "; ".join(f"{'.'.join(str(p) for p in e['loc']) or '(file)'}: {e['msg']}" for e in exc.errors())


def parse(data: Mapping[str, Any], path: Path) -> TaskFileModel:
    try:
        return TaskFileModel.model_validate(data)
    except ValidationError as exc:
        raise TaskFileError(f"{path}: {_problem(exc)}") from None


def load(path: str | Path) -> McpTask:
    """Read, check and split a task file (TaskFileError with the file and the fix otherwise)."""
    path = Path(path).expanduser().resolve()
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise TaskFileError(f"task file {path} cannot be read: {exc}") from None
    except yaml.YAMLError as exc:
        raise TaskFileError(f"task file {path} is not YAML: {exc}") from None
    if not isinstance(raw, dict):
        raise TaskFileError(f"task file {path} must be a mapping (name:, server:, scenarios:, ...)")
    spec = parse(raw, path)
    scenarios = read_scenarios(path.parent / spec.scenarios)
    if spec.read_back is not None:
        field = spec.read_back.expect_field
        missing = [s.line for s in scenarios if s.data.get(field) is None]
        if missing:
            raise TaskFileError(
                f"{path}: reward.kind read_back needs {field!r} (what the read-back must hold) on every scenario; "
                f"lines {missing[:10]} have none"
            )
    if spec.reward.kind in (RewardKind.EXACT, RewardKind.NORMALISED, RewardKind.CONTAINS):
        missing = [s.line for s in scenarios if s.answer is None]
        if missing:
            raise TaskFileError(
                f"{path}: reward.kind {spec.reward.kind.value} needs an 'answer' on every scenario; "
                f"lines {missing[:10]} have none (or use reward.kind: check)"
            )
    check_fn = compile_check(spec.reward.check, path) if spec.reward.check is not None else None
    train = tuple(s for s in scenarios if not is_held_out(s.prompt, spec.held_out_fraction))
    held = tuple(s for s in scenarios if is_held_out(s.prompt, spec.held_out_fraction))
    if not train or not held:
        raise TaskFileError(
            f"{path}: {len(scenarios)} scenarios split into {len(train)} training and {len(held)} held-out; "
            "both must be non-empty (add scenarios or change held_out_fraction)"
        )
    return McpTask(path=path, spec=spec, train=train, held_out=held, check_fn=check_fn)


def named_variables(task_file: str | Path) -> list[str]:
    """The variables a task file names for its server (`server.env_vars`, `server.auth_env_var`),
    read without loading its scenarios; [] when it cannot be read (loading it says why).

    The environment process that plays the task must receive them (`Settings.user_code_env`) so
    that the server it starts can; mcp-rl's own keys are left out (the server never gets them)."""
    try:
        raw = yaml.safe_load(Path(task_file).expanduser().read_text(encoding="utf-8"))
        server = ServerSpec.model_validate(raw["server"])
    except (OSError, yaml.YAMLError, TypeError, KeyError, ValidationError):
        return []
    names = [*server.env_vars, *([server.auth_env_var] if server.auth_env_var else [])]
    return [n for n in dict.fromkeys(names) if n not in SECRET_ENV_VARS]


def find_task_files(folders: Sequence[Path]) -> list[Path]:
    """Task files directly in `folders` (how discovery would list them)."""
    found: list[Path] = []
    for folder in folders:
        if folder.is_dir():
            found.extend(sorted(p for p in folder.iterdir() if p.name.endswith(TASK_FILE_SUFFIX)))
    return found


JUDGE_KEY_VARS = ("OPENROUTER_API_KEY", "OPENROUTER_BASE_URL")


def keys_needed(task_file: object) -> list[str]:
    """The variables of mcp-rl's own the environment process needs for this task file: OpenRouter's
    key (and base URL) when its judge is a paid model, else none. A file that cannot be read needs
    none (the environment reports it when it loads the file)."""
    if not isinstance(task_file, str) or not task_file.endswith(TASK_FILE_SUFFIX):
        return []
    try:
        raw = yaml.safe_load(Path(task_file).expanduser().read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError, ValueError):
        return []
    judge = raw.get("judge") if isinstance(raw, dict) else None
    if isinstance(judge, dict) and isinstance(judge.get("model"), str) and judge["model"] != LOCAL_JUDGE:
        return list(JUDGE_KEY_VARS)
    return []
