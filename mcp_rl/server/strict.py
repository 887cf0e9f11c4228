"""Strict tool inputs: an unknown argument is refused, naming the valid ones and where it belongs.

The SDK drops arguments a tool does not declare, so `rl_start_training(environment="gsm8k",
total_steps=10)` would train whatever is selected with the default steps. After every tool is
`checked_arguments` runs before every call (`RlServer.call_tool`, server/rl_server.py) and refuses
an undeclared argument, or one of the wrong JSON type, with a message the agent can act on; the
published input schemas say `additionalProperties: false`. Nothing runs when an argument is
refused.
"""

from __future__ import annotations

import difflib
import reprlib
from typing import Any

from mcp.server.mcpserver.exceptions import ToolError

from mcp_rl.server.strict_types import type_problems

# Names agents use for something that is chosen elsewhere.
_ENVIRONMENT_WORDS = frozenset({"environment", "env", "env_name", "environment_name", "name", "env_id"})
_RUN_OPTION_ALIASES = {
    "steps": "total_steps",
    "num_steps": "total_steps",
    "lr": "learning_rate",
    "model": "base_model",
    "rank": "lora_rank",
    "project": "wandb_project",
}
# Arguments a host adds to every tool on its own, meaning nothing to the server: dropped before the
# check. Gemini CLI gives every tool a boolean `wait_for_previous` (its model sets it for dependent
# calls) and forwards it unchanged.
HOST_ARGUMENTS = frozenset({"wait_for_previous"})
# Tools that act on the selected environment and its config.
_USES_SELECTION = frozenset({"rl_start_training", "rl_test_inference", "rl_get_current_config", "rl_edit_config"})

_repr = reprlib.Repr()
_repr.maxstring = 60
_repr.maxother = 60


def where_it_belongs(tool: str, key: str, value: Any, valid: list[str]) -> str:
    """One sentence saying where an argument `tool` does not take should go instead."""
    shown = _repr.repr(value)
    if tool == "rl_test_inference" and key in ("prompt", "prompts", "questions"):
        return (
            f"{key}: rl_test_inference runs the selected environment's own items (num_steps of them); "
            "it takes no prompts. Select another environment to test other data."
        )
    if tool == "rl_test_inference" and key in ("model", "model_id"):
        return f"{key}: use models=[{shown}] (a list of OpenRouter ids or 'local')."
    if key in _ENVIRONMENT_WORDS and tool in _USES_SELECTION:
        return f"{key}: the environment is chosen with rl_select_environment({shown}); {tool} uses the selected one."
    # The run options are the surface's (mcp_rl.config.options), not imported before the server answers.
    from mcp_rl.config import RUN_OPTION_NAMES

    option = key if key in RUN_OPTION_NAMES else _RUN_OPTION_ALIASES.get(key)
    if option is not None and option not in valid:
        return f"{key} is a run option: rl_edit_config('{option}', {shown}), then call {tool}."
    close = difflib.get_close_matches(key, valid, n=1, cutoff=0.6)
    if close:
        return f"{key}: did you mean {close[0]}?"
    if tool in _USES_SELECTION:
        return (
            f"{key}: if it is a field of the environment's config, set it with rl_edit_config('{key}', {shown}) "
            "(rl_get_current_config lists the fields)."
        )
    return f"{key} is not a parameter of {tool}."


def unknown_arguments_message(tool: str, unknown: dict[str, Any], valid: list[str]) -> str:
    names = ", ".join(sorted(unknown))
    params = ", ".join(valid) if valid else "none (call it with {})"
    hints = " ".join(where_it_belongs(tool, key, value, valid) for key, value in sorted(unknown.items()))
    return f"{tool} does not take {names}. Valid parameters: {params}. {hints} Nothing was done."


def checked_arguments(tool: str, arguments: dict[str, Any], input_schema: dict[str, Any]) -> dict[str, Any]:
    """`arguments` without what hosts add on their own (HOST_ARGUMENTS), or a ToolError naming
    each undeclared argument and where it belongs, or each value of the wrong JSON type."""
    if not isinstance(arguments, dict):
        return arguments
    properties: dict[str, Any] = input_schema.get("properties") or {}
    valid = list(properties)
    if not HOST_ARGUMENTS.isdisjoint(arguments):
        arguments = {k: v for k, v in arguments.items() if k in properties or k not in HOST_ARGUMENTS}
    unknown = {k: v for k, v in arguments.items() if k not in properties}
    if unknown:
        raise ToolError(unknown_arguments_message(tool, unknown, valid))
    problems = type_problems(arguments, properties)  # mcp_rl.server.strict_types: no value converted
    if problems:
        raise ToolError(f"{tool}: {'; '.join(problems)}. Nothing was done.")
    return arguments


def strict_schema(input_schema: dict[str, Any]) -> dict[str, Any]:
    """The published input schema: no argument beyond the declared ones."""
    return {**input_schema, "additionalProperties": False}
