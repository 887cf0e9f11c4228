"""Strict tool inputs: an unknown argument is refused, naming the valid ones and where it belongs.

The SDK drops arguments a tool does not declare, so `rl_start_training(environment="gsm8k",
total_steps=10)` would train whatever is selected with the default steps. After every tool is
registered, `make_strict` gives each one an argument model that forbids extra keys (its input
schema then says `additionalProperties: false`) and refuses them first, with a message the agent
can act on. Nothing runs when an argument is refused.
"""

from __future__ import annotations

import difflib
import reprlib
from typing import Any

from mcp.server import MCPServer
from pydantic import ValidationError
from pydantic_core import PydanticCustomError

from mcp_rl.config import RUN_OPTION_NAMES
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


def make_strict(mcp: MCPServer) -> None:
    """Refuse unknown arguments on every registered tool (call once, after registering).

    A check in front of each tool's argument validation, and `additionalProperties: false` in its
    input schema. The arguments hosts inject (HOST_ARGUMENTS) are dropped, not refused. Not a stricter subclass of the argument model: building 17 pydantic models took
    about 110 ms of every start, a third of what the server adds to a bare MCPServer's start-up.
    """
    # The SDK has no public hook for argument validation; Tool and FuncMetadata are documented
    # pydantic models of mcp.server.mcpserver.tools.base.
    for tool in mcp._tool_manager.list_tools():
        meta = tool.fn_metadata
        base = meta.arg_model
        valid = [f.alias or name for name, f in base.model_fields.items()]
        validate = meta.validate_arguments

        def strict_validate(
            arguments: dict[str, Any],
            _tool: str = tool.name,
            _valid: list[str] = valid,
            _title: str = base.__name__,
            _validate: Any = validate,
            _properties: dict[str, Any] = tool.parameters.get("properties") or {},
        ) -> dict[str, Any]:
            if isinstance(arguments, dict) and not HOST_ARGUMENTS.isdisjoint(arguments):
                arguments = {k: v for k, v in arguments.items() if k in _valid or k not in HOST_ARGUMENTS}
            unknown = {k: v for k, v in arguments.items() if k not in _valid} if isinstance(arguments, dict) else {}
            if unknown:
                message = unknown_arguments_message(_tool, unknown, _valid)
                error = PydanticCustomError("unknown_argument", "{detail}", {"detail": message})
                # A ValidationError, as the SDK reports a caller's bad arguments (a tool error).
                raise ValidationError.from_exception_data(_title, [{"type": error, "loc": (), "input": arguments}])
            problems = type_problems(arguments, _properties) if isinstance(arguments, dict) else []
            if problems:  # mcp_rl.server.strict_types: no string/bool/number converted into another
                message = f"{_tool}: {'; '.join(problems)}. Nothing was done."
                error = PydanticCustomError("argument_type", "{detail}", {"detail": message})
                raise ValidationError.from_exception_data(_title, [{"type": error, "loc": (), "input": arguments}])
            return _validate(arguments)

        # On the instance: FuncMetadata is a pydantic model, and this is not one of its fields.
        object.__setattr__(meta, "validate_arguments", strict_validate)
        tool.parameters = {**tool.parameters, "additionalProperties": False}
