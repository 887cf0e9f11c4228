"""A new task file from a template (rl_new_environment, `mcp-rl new-env NAME`).

The file is a complete, working task on the public interface (mcp_rl.task): seeded training and
held-out items that never overlap, a few-shot chat, an exact-match score with reference answers.
It trains as written; the user edits `train_items`/`held_out_items` (built by `make`), `messages`
and `score` into their own task. The template is `task_template.py`, a real module.

It is written into the folder asked for (inside an MCP_RL_ENV_PATHS folder or $MCP_RL_HOME/envs,
so it is always listed), else the first MCP_RL_ENV_PATHS folder, else $MCP_RL_HOME/envs. Its name
must not be one an environment already has (it would be listed as an ignored duplicate), nor a
module it would shadow (the standard library, mcp_rl, an installed package, sitecustomize). An
existing file is never replaced, and the file appears whole or not at all (written beside it, then
linked into place).
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import sys
import tempfile
from pathlib import Path

from pydantic import BaseModel, Field

from mcp_rl.environments.discovery import scan
from mcp_rl.environments.mcp_family.taskfile import TASK_FILE_SUFFIX, TaskFileError, load
from mcp_rl.errors import UserError, clip
from mcp_rl.paths import normal_path
from mcp_rl.settings import Settings

NAME = re.compile(r"^[a-z][a-z0-9_]{0,47}$")
# The template is a real module (lint and type checks read it); a copy has these replaced.
TEMPLATE = Path(__file__).with_name("task_template.py")
TEMPLATE_NAME, TEMPLATE_CLASS, TEMPLATE_TITLE = "template_task", "TemplateTask", "Template task"
# Module names a task file must not take: it would shadow them for anything importing from its
# folder (Python runs `sitecustomize`/`usercustomize` at every start of an interpreter).
RESERVED = frozenset({"mcp_rl", "sitecustomize", "usercustomize"})
MAX_FOLDER_CHARS = 1024


class NewEnvironment(BaseModel):
    """rl_new_environment's answer."""

    name: str = Field(description="The task's name: pass it to rl_select_environment.")
    path: str = Field(description="The file written.")
    folder: str
    searched: bool = Field(description="True: the folder is searched for environments (rl_list_environments lists it).")
    edit: list[str] = Field(description="What to change in the file to make it your task.")
    next_calls: list[str]
    notes: list[str] = []


def class_name_of(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("_") if part) or "MyTask"


def default_folder(settings: Settings) -> Path:
    """The first MCP_RL_ENV_PATHS folder, else $MCP_RL_HOME/envs."""
    return settings.env_paths[0] if settings.env_paths else settings.user_envs_dir


def template_text(name: str) -> str:
    """The template with the task's name, class and title put in."""
    text = TEMPLATE.read_text(encoding="utf-8")
    title = name.replace("_", " ").capitalize()
    for old, new in ((TEMPLATE_CLASS, class_name_of(name)), (TEMPLATE_NAME, name), (TEMPLATE_TITLE, title)):
        text = text.replace(old, new)
    # The template's note to its maintainers is not for the user's file.
    return re.sub(r"\n# This file is the template .*?\n\n", "\n", text, count=1, flags=re.S)


def shadowed_module(name: str) -> str | None:
    """What a module called `name` would shadow, or None."""
    if name in RESERVED:
        return f"{name!r} is a name Python or mcp-rl imports itself"
    if name in sys.stdlib_module_names:
        return f"{name!r} is a module of Python's standard library"
    installed = importlib.metadata.packages_distributions()
    if name in installed:
        return f"{name!r} is the installed package {', '.join(sorted(set(installed[name])))}"
    return None


def _taken_names(settings: Settings) -> set[str]:
    catalog = scan(settings.environment_dirs())
    return {env.name for env in catalog.environments} | {d.name for d in catalog.duplicates}


def _free_name(name: str, taken: set[str], folder: Path) -> str:
    stem = name[:44]
    for n in range(2, 1000):
        candidate = f"{stem}_{n}"
        if candidate not in taken and shadowed_module(candidate) is None and not (folder / f"{candidate}.py").exists():
            return candidate
    return f"{stem}_task"


def _folder(settings: Settings, folder: str | Path | None) -> Path:
    """The folder to write into: given (inside a searched folder), else the default one."""
    if folder is None or str(folder) == "":
        return default_folder(settings)
    text = str(folder)
    if "\x00" in text:
        raise UserError("folder holds a NUL byte: give a plain absolute path. Nothing was written.")
    if len(text) > MAX_FOLDER_CHARS:
        raise UserError(
            f"folder is {len(text):,} characters long (at most {MAX_FOLDER_CHARS}): give a shorter absolute path, "
            "or leave it out. Nothing was written."
        )
    target = normal_path(text)
    if not target.is_absolute():
        raise UserError(f"folder {clip(text)} is relative: give an absolute path. Nothing was written.")
    roots = [*settings.env_paths, settings.user_envs_dir]
    resolved = target.resolve()
    if not any(
        resolved == r.expanduser().resolve() or resolved.is_relative_to(r.expanduser().resolve()) for r in roots
    ):
        raise UserError(
            f"folder {clip(str(resolved))} is not inside a folder mcp-rl searches for environments: use one inside "
            f"{' or '.join(str(r) for r in roots)} (MCP_RL_ENV_PATHS or $MCP_RL_HOME/envs), or leave folder out. "
            "Nothing was written."
        )
    return target


def new_task_file(settings: Settings, name: str, folder: str | Path | None = None) -> NewEnvironment:
    """Write NAME.py, a working task, into `folder`; UserError (nothing written) when the name is
    not a lowercase identifier, is taken by an environment or shadows a module, the folder is not
    inside a searched folder or not usable, or the file exists."""
    name = (name or "").strip() if isinstance(name, str) else ""
    if not NAME.match(name):
        raise UserError(
            f"name {clip(name)} is not usable: give a lowercase Python identifier (letters, digits, underscores; "
            "starts with a letter; at most 48 characters), e.g. 'larger_number'. Nothing was written."
        )
    target = _folder(settings, folder)
    if (target / f"{name}.py").exists():
        raise UserError(f"{target / f'{name}.py'} exists: nothing was written. Pick another name, or edit that file.")
    taken = _taken_names(settings)
    shadow = shadowed_module(name)
    if name in taken or shadow is not None:
        why = (
            f"an environment named {name!r} is already listed"
            if name in taken
            else f"{shadow}, which a task file would shadow"
        )
        raise UserError(
            f"name {name!r} is not free: {why}. Pick another name, e.g. {_free_name(name, taken, target)!r}. "
            "Nothing was written."
        )
    if target.exists() and not target.is_dir():
        raise UserError(f"folder {clip(str(target))} exists and is not a folder. Nothing was written.")
    try:
        target.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(
            f"folder {clip(str(target))} cannot be created: {exc.strerror or exc}. Nothing was written."
        ) from None
    path = target / f"{name}.py"
    if path.exists():
        raise UserError(f"{path} exists: nothing was written. Pick another name, or edit that file.")
    text = template_text(name)
    fd, temp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=target)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        try:
            os.link(temp, path)  # fails if the file appeared meanwhile: never replaced
        except FileExistsError:
            raise UserError(f"{path} exists: nothing was written. Pick another name, or edit that file.") from None
    finally:
        os.unlink(temp)
    resolved = target.resolve()
    searched = any(
        resolved == d.expanduser().resolve() or resolved.is_relative_to(d.expanduser().resolve())
        for d in settings.environment_dirs()
    )
    notes = []
    if not searched:
        notes.append(
            f"{resolved} is not searched for environments until the server restarts (it did not exist when the "
            "server started): restart the MCP server to list and select this task."
        )
    return NewEnvironment(
        name=name,
        path=str(path.resolve()),
        folder=str(resolved),
        searched=searched,
        edit=[
            "train_items() and held_out_items(): the items to train on and the ~200 held out (never the same "
            "question); each is built by make(...), which keeps 'answer' as a string when the right answer is known",
            "messages(item) (or prompt(item) for a single user message): what the model sees",
            "score(completion, item): what an answer is worth, within score_range",
            "max_tokens, system_prompt, the class docstring; metadata(item) labels to group the held-out figures",
        ],
        next_calls=[
            f"rl_validate_environment(name='{name}') after each edit: items, overlap, scores, the base model's answers",
            f"rl_select_environment(name='{name}')",
            "rl_test_inference() to smoke-test it against the base model",
            "rl_start_training(); then rl_check_status shows held_out: base -> trained with the paired test",
        ],
        notes=notes,
    )


MCP_TASK_TEMPLATE = """\
# An MCP server as a training environment: the policy learns to use its tools.
# Train it: rl_select_environment('mcp'), rl_edit_config(field='task_file', value='{path}').
name: {name}
server:
{server}
scenarios: {scenarios}               # one JSON object a line: {{"prompt": ..., "answer": ...}}
held_out_fraction: 0.2                # split by each prompt's hash: held-out never trains
reward:
  kind: normalised                    # exact | normalised | check
  # kind: check                       # your own reward, from the answer and every call made:
  # check: |
  #   def check(answer, trace):       # trace: [{{"name", "arguments", "result", "is_error"}}, ...]
  #       return 1.0 if trace and not trace[-1]["is_error"] else 0.0
# tools: [tool_a, tool_b]             # offered by name; default: every tool that does not declare
                                      # destructiveHint or openWorldHint
limits: {{max_turns: 6, max_tool_calls: 8, call_timeout_s: 10, output_bytes: 2000, max_tokens_per_turn: 128,
         episode_timeout_s: 120}}
# system_prompt: You answer with the tools' help.
# first_turn_prefill: '<tool_call>{{"name": "TOOL", "arguments": {{"'   # small models: start with a call
"""
EXAMPLE_SCENARIOS = 6


class McpServerGiven(BaseModel):
    """Where an MCP task's tools are: a stdio command or a Streamable HTTP URL."""

    command: list[str] | None = None
    url: str | None = None
    env_vars: list[str] = []
    auth_env_var: str | None = None


def mcp_task_text(name: str, server: McpServerGiven, scenarios: str, path: Path) -> str:
    lines: list[str] = []
    if server.command:
        lines.append(f"  command: {json.dumps(server.command[0])}")
        lines.append(f"  args: {json.dumps(server.command[1:])}")
        lines.append(f"  env_vars: {json.dumps(server.env_vars)}        # the only variables it receives")
    else:
        lines.append(f"  url: {json.dumps(server.url)}")
        if server.auth_env_var:
            lines.append(f"  auth_env_var: {json.dumps(server.auth_env_var)}   # sent as a bearer token")
    return MCP_TASK_TEMPLATE.format(name=name, server="\n".join(lines), scenarios=scenarios, path=path)


def new_mcp_task_file(
    settings: Settings, name: str, server: McpServerGiven, folder: str | Path | None = None
) -> NewEnvironment:
    """Write NAME.mcp.yaml (an MCP server's task file) and NAME.scenarios.jsonl (example lines to
    replace) into `folder`; UserError (nothing written) for a bad name, server or folder, or when
    either file exists. The task file is checked by loading it before the answer."""
    name = (name or "").strip() if isinstance(name, str) else ""
    if not NAME.match(name):
        raise UserError(
            f"name {clip(name)} is not usable: give a lowercase identifier (letters, digits, underscores; starts "
            "with a letter; at most 48 characters), e.g. 'memory_recall'. Nothing was written."
        )
    if bool(server.command) == bool(server.url):
        raise UserError(
            "give exactly one of mcp_command (a stdio server's command line, e.g. ['npx', '-y', "
            "'@modelcontextprotocol/server-memory']) and mcp_url (a Streamable HTTP endpoint). Nothing was written."
        )
    target = _folder(settings, folder)
    path, scenarios = target / f"{name}{TASK_FILE_SUFFIX}", target / f"{name}.scenarios.jsonl"
    for existing in (path, scenarios):
        if existing.exists():
            raise UserError(f"{existing} exists: nothing was written. Pick another name, or edit that file.")
    try:
        target.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(
            f"folder {clip(str(target))} cannot be created: {exc.strerror or exc}. Nothing was written."
        ) from None
    examples = "".join(
        json.dumps(
            {"prompt": f"(example {i}: replace with a question the server's tools answer)", "answer": f"answer {i}"}
        )
        + "\n"
        for i in range(1, EXAMPLE_SCENARIOS + 1)
    )
    written: list[Path] = []
    try:
        for file, text in ((scenarios, examples), (path, mcp_task_text(name, server, scenarios.name, path))):
            with open(file, "x", encoding="utf-8") as fh:  # "x": never replaces a file
                fh.write(text)
            written.append(file)
        load(path)
    except (TaskFileError, FileExistsError) as exc:
        for file in written:
            file.unlink(missing_ok=True)
        raise UserError(f"the MCP task file could not be written: {exc}. Nothing was written.") from None
    return NewEnvironment(
        name=name,
        path=str(path.resolve()),
        folder=str(target.resolve()),
        searched=False,
        edit=[
            f"{scenarios.name}: your scenarios, one {{'prompt', 'answer'}} a line (or rl_generate_mcp_scenarios "
            "writes some from the server's tools with a hosted model, priced first)",
            "reward: normalised/exact against each answer, or kind: check with Python check(answer, trace)",
            "tools: the tools to offer by name (those declaring destructiveHint or openWorldHint only when named)",
            "limits: turns, tool calls, seconds per call and per episode, output bytes, tokens per turn",
        ],
        next_calls=[
            f"rl_validate_environment(name='{path.resolve()}'): the server starts, its tools render, answers score",
            "rl_select_environment(name='mcp')",
            f"rl_edit_config(field='task_file', value='{path.resolve()}')",
            "rl_test_inference() to smoke-test it (tool-call validity, calls per episode, success)",
            "rl_start_training()",
        ],
        notes=["An MCP task file is not listed by rl_list_environments: the 'mcp' environment trains it."],
    )
