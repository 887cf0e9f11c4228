"""One edit of the session's config (rl_edit_config): a run option or an environment field,
checked field by field and then as the whole config the environment's own class makes of it,
and stored only when every check passes.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Callable
from typing import Any, Literal, get_args, get_origin

from pydantic import BaseModel, ValidationError

from mcp_rl.config.checks import (
    MAX_CONFIG_BYTES,
    check_base_model,
    check_group_vs_batch,
    check_value_size,
    clean_edits,
    json_size,
    validate_field,
)
from mcp_rl.config.options import RUN_OPTION_NAMES, RunOptions, effective_backend, locked_fields, resolve_run_options
from mcp_rl.config.session import Session, SessionStore, config_revision
from mcp_rl.environments.config_check import check_whole_config
from mcp_rl.environments.introspect import ConfigSpec
from mcp_rl.environments.introspect_worker import IntrospectionWorker
from mcp_rl.errors import NotFound, NotSelected, UserError, clip, clip_message
from mcp_rl.settings import Settings


class EditResult(BaseModel):
    message: str
    field: str
    value: Any
    previous_value: Any = None
    kind: Literal["environment", "run_option"]
    # The revision of the config this edit wrote, taken under the session's lock (another edit
    # landing right after cannot change it).
    revision: str | None = None


# Validates a whole environment config (the environment's own class, in a child process); returns
# the errors, empty when valid.
WholeConfigCheck = Callable[[dict[str, Any]], list[str]]


def _check_whole_config(
    check: WholeConfigCheck, spec: ConfigSpec, edits: dict[str, Any], field: str, value: Any
) -> None:
    """Run the config class's own validators (e.g. min <= max) over the config this edit makes."""
    errors = check({**spec.initial_values, **edits})
    if errors:
        raise UserError(
            f"Invalid value {clip(value)} for {field}: {spec.config_class} refuses the resulting config: "
            f"{clip_message('; '.join(errors), 400)}. Nothing was changed."
        )


def edit_config(
    settings: Settings,
    store: SessionStore,
    spec: ConfigSpec,
    field: str,
    value: Any,
    whole_config_check: WholeConfigCheck | None = None,
    worker: IntrospectionWorker | None = None,
    then: Callable[[Session], Session] | None = None,
) -> EditResult:
    """Validate one edit and persist it; on any error nothing changes.

    Each field is checked against its JSON schema here, then the whole resulting config by the
    config class's own validators (which a schema cannot express), in a child process unless
    introspection found none (a fork of the server's warm introspection `worker` when there is
    one); `whole_config_check` replaces that child (tests). `then` changes the edited session
    further in the same write (under the same lock, so the revision answered is the one written).
    Text is read as JSON (coerce); a value over MAX_VALUE_BYTES, or a config over
    MAX_CONFIG_BYTES, is refused.
    """
    check_value_size(field, value)

    result: dict[str, EditResult] = {}

    def change(session: Session) -> Session:
        if session.environment is None:
            raise NotSelected("No environment selected. Call rl_select_environment(name) first.")
        options, _ = resolve_run_options(settings, session.run_options, session.environment)
        backend = effective_backend(settings, options.backend)
        locked = locked_fields(backend)
        edits, _ = clean_edits(spec, session.edits)
        if field in RUN_OPTION_NAMES:
            new_options = dict(session.run_options)
            new_options[field] = run_option_value(field, value)
            try:
                resolved, _ = resolve_run_options(settings, new_options, session.environment)
            except ValidationError as exc:
                detail = "; ".join(err["msg"] for err in exc.errors())
                raise UserError(
                    f"Invalid value {clip(value)} for run option {field}: {detail}. Nothing was changed."
                ) from None
            new_options[field] = resolved.model_dump(mode="json")[field]  # stored as answered: 1.0 is kept as 1
            group = edits.get("group_size", _initial(spec, "group_size"))
            check_group_vs_batch(group, resolved.batch_size)
            if field == "base_model":
                check_base_model(settings, resolved)
            previous = getattr(options, field)
            result["r"] = EditResult(
                message=f"Run option {field} set to {clip(getattr(resolved, field))}.",
                field=field,
                value=getattr(resolved, field),
                previous_value=previous,
                kind="run_option",
            )
            return session.model_copy(update={"run_options": new_options, "edits": edits})
        if field in locked.env or (field.startswith("openai.") and field[7:] in locked.openai):
            locked_value = locked.env.get(field, locked.openai.get(field[7:]))
            raise UserError(
                f"{field} is locked (value: {locked_value!r}); the infrastructure sets it. "
                "Editable fields are listed by rl_get_current_config. Nothing was changed."
            )
        field_spec = spec.field(field)
        if field_spec is None:
            editable = [f.name for f in spec.fields if f.name not in locked.env] + list(RUN_OPTION_NAMES)
            close = difflib.get_close_matches(field, editable, n=3, cutoff=0.5) if len(field) <= 200 else []
            hint = f" Did you mean {', '.join(close)}?" if close else ""
            raise NotFound(
                f"Unknown field {clip(field)} for {session.environment.name}.{hint} "
                f"Editable fields: {', '.join(sorted(editable))}."
            )
        checked = validate_field(field_spec, value)
        if field == "group_size":
            previous_group = edits.get("group_size", _initial(spec, "group_size"))
            check_group_vs_batch(checked, options.batch_size, previous_group=previous_group)
        previous = edits.get(field, field_spec.initial)
        edits = {**edits, field: checked}
        if spec.has_validators is not False:
            env = session.environment
            check = whole_config_check or (
                lambda values: check_whole_config(settings, env, values, list(edits), worker)
            )
            _check_whole_config(check, spec, edits, field, value)
        result["r"] = EditResult(
            message=f"{field} set to {clip(checked)} (was {clip(previous)}).",
            field=field,
            value=checked,
            previous_value=previous,
            kind="environment",
        )
        return session.model_copy(update={"edits": edits})

    def write(session: Session) -> Session:
        new = change(session)
        if then is not None:
            new = then(new)
        size = json_size({"edits": new.edits, "run_options": new.run_options})
        if size > MAX_CONFIG_BYTES:
            raise UserError(
                f"With this value the config would be {size:,} bytes as JSON; a config is at most "
                f"{MAX_CONFIG_BYTES:,} bytes (256 KiB). Shorten this or another long value. Nothing was changed."
            )
        result["r"].revision = config_revision(new)
        return new

    session = store.update(write)
    edit = result["r"]
    if session.notes:
        edit.message += " Repairs of the stored session: " + " ".join(session.notes)
    return edit


def _takes_text(annotation: Any) -> bool:
    """True when a run option's type accepts text (str, or a Literal of strings)."""
    if annotation is str:
        return True
    if get_origin(annotation) is Literal:
        return any(isinstance(arg, str) for arg in get_args(annotation))
    return any(_takes_text(arg) for arg in get_args(annotation))


def run_option_value(field: str, value: Any) -> Any:
    """The value an agent sent for a run option, as its type means it: text kept as text for an
    option that takes text (a Slurm account "12345" stays "12345", an integer given for it is
    its digits); for any other option, text is read as JSON and must be a number, boolean or
    null there ("1:30", "0x0A", "off", "~" are refused, never read as YAML would)."""
    if _takes_text(RunOptions.model_fields[field].annotation):
        if isinstance(value, int) and not isinstance(value, bool):
            return str(value)
        return value
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except (ValueError, RecursionError):
        raise UserError(
            f"Invalid value {clip(value)} for run option {field}: text is read as JSON, and this is not a JSON "
            'number, boolean or null (send 90 or 1.5, not "1:30" or "0x0A"). Nothing was changed.'
        ) from None


def _initial(spec: ConfigSpec, name: str) -> Any:
    field = spec.field(name)
    return field.initial if field else None
