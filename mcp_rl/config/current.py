"""The current config as an agent reads it (rl_get_current_config): each editable field and run
option with its default and current value, the locked fields, and the notes that explain them.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from mcp_rl.config.checks import clean_edits
from mcp_rl.config.options import RUN_OPTION_NAMES, RunOptions, effective_backend, locked_fields, resolve_run_options
from mcp_rl.config.session import Session
from mcp_rl.environments.introspect import ConfigSpec
from mcp_rl.settings import Settings


class ConfigurableField(BaseModel):
    name: str
    type: str
    default: Any = None
    description: str = ""
    current_value: Any = None


class LockedField(BaseModel):
    name: str
    locked_value: Any
    description: str = ""


class CurrentConfig(BaseModel):
    environment: str
    backend: Literal["local", "tinker"]
    config_class: str
    config_source: str = Field(description="config_init, or fallback (BaseEnvConfig defaults) with the reason")
    fallback_reason: str | None = None
    configurable_fields: list[ConfigurableField]
    locked_fields: list[LockedField]
    run_options: list[ConfigurableField]
    tip: str
    notes: list[str] = Field(
        default_factory=list, description="Repairs of the stored session: values ignored or reset to defaults."
    )
    key_notes: list[str] = Field(
        default_factory=list,
        description="Secret variables that held a placeholder (such as `${TINKER_API_KEY}`) and count as unset.",
    )


def current_config(settings: Settings, session: Session, spec: ConfigSpec) -> CurrentConfig:
    assert session.environment is not None
    options, defaults = resolve_run_options(settings, session.run_options, session.environment)
    backend = effective_backend(settings, options.backend)
    locked = locked_fields(backend)
    edits, edit_notes = clean_edits(spec, session.edits)
    configurable = [
        ConfigurableField(
            name=f.name,
            type=f.type,
            default=f.initial,
            description=f.description,
            current_value=edits.get(f.name, f.initial),
        )
        for f in spec.fields
        if f.name not in locked.env
    ]
    # A field is locked or editable, never both: those a run option sets are listed as run options.
    locked_list = [
        LockedField(name=name, locked_value=value, description=_field_description(spec, name))
        for name, value in locked.env.items()
        if name not in RUN_OPTION_NAMES
    ] + [LockedField(name=f"openai.{name}", locked_value=value) for name, value in locked.openai.items()]
    option_list = [
        ConfigurableField(
            name=name,
            type=_option_type(name),
            default=defaults.get(name),
            description=RunOptions.model_fields[name].description or "",
            current_value=getattr(options, name),
        )
        for name in RUN_OPTION_NAMES
    ]
    return CurrentConfig(
        environment=session.environment.name,
        backend=backend,
        config_class=spec.config_class,
        config_source=spec.source,
        fallback_reason=spec.fallback_reason,
        configurable_fields=configurable,
        locked_fields=locked_list,
        run_options=option_list,
        key_notes=settings.placeholder_notes(),
        tip=(
            "Change a configurable field or run option with rl_edit_config(field, value). Locked fields "
            "are set by the infrastructure ('derived' ones when the run starts). Shorter runs: lower "
            "total_steps; group_size must divide batch_size."
        ),
        notes=session.notes + edit_notes + _replaced_by_run_options(spec, session.run_options, options),
    )


def _replaced_by_run_options(spec: ConfigSpec, edited: dict[str, Any], options: RunOptions) -> list[str]:
    """Where a value the environment's config_init set is replaced by a run option, say so and
    how to keep it (the run option decides what the trainer and the API use)."""
    notes = []
    for field in spec.fields:
        if field.name not in RUN_OPTION_NAMES or field.name in edited:
            continue
        ours = getattr(options, field.name)
        # Only what config_init chose itself (not the config class's default) is the environment's.
        if field.initial is not None and field.initial != field.default and field.initial != ours:
            notes.append(
                f"The environment's config_init sets {field.name}={field.initial!r}; the run uses the run option "
                f"{field.name}={ours!r} (the backend's default, which the trainer and the API follow). To keep the "
                f"environment's value: rl_edit_config({field.name!r}, {field.initial!r})."
            )
    return notes


def _field_description(spec: ConfigSpec, name: str) -> str:
    field = spec.field(name)
    return field.description if field else ""


def _option_type(name: str) -> str:
    annotation = RunOptions.model_fields[name].annotation
    return getattr(annotation, "__name__", str(annotation))
