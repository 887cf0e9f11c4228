"""After a selection, the run options carried over from the last environment made to fit the new
one, so a selection always leaves a config rl_start_training accepts: each adjusted or reset
option is named in the selection's answer.

    batch_size   not a multiple of the new environment's group_size (or smaller than it): raised
                 to the next multiple of group_size (the run keeps at least the batch it had)
    eval_metric  named a metric of another environment's own evaluate(): reset (the rule applies)
"""

from __future__ import annotations

import math
from typing import Any

from mcp_rl.config.checks import check_group_vs_batch, clean_edits
from mcp_rl.config.options import RunOptions, resolve_run_options
from mcp_rl.config.session import Session, SessionStore
from mcp_rl.environments.introspect import ConfigSpec
from mcp_rl.runconfig import EnvironmentRef
from mcp_rl.settings import Settings

MAX_BATCH = int(RunOptions.model_fields["batch_size"].metadata[-1].le)


def _same_environment(a: EnvironmentRef | None, b: EnvironmentRef | None) -> bool:
    if a is None or b is None:
        return False
    return (a.file_path.resolve(), a.class_name, a.name) == (b.file_path.resolve(), b.class_name, b.name)


def fitted_options(
    settings: Settings, session: Session, spec: ConfigSpec, previous: EnvironmentRef | None
) -> tuple[dict[str, Any], list[str]]:
    """The session's run options made to fit its environment, and a sentence per change."""
    options = dict(session.run_options)
    notes: list[str] = []
    resolved, _ = resolve_run_options(settings, options, session.environment)
    edits, _ = clean_edits(spec, session.edits)
    group = {**spec.initial_values, **edits}.get("group_size")
    name = session.environment.name if session.environment else "the environment"
    batch = resolved.batch_size
    if isinstance(group, int) and not isinstance(group, bool) and group >= 1 and (batch % group or group > batch):
        fitted = min(max(group, math.ceil(batch / group) * group), MAX_BATCH // group * group)
        options["batch_size"] = fitted
        carried = "carried over" if "batch_size" in session.run_options else "the default"
        notes.append(
            f"batch_size {batch} ({carried}) is not a multiple of {name}'s group_size {group}: set to {fitted}."
        )
    if resolved.eval_metric is not None and not _same_environment(previous, session.environment):
        options.pop("eval_metric", None)
        notes.append(
            f"eval_metric {resolved.eval_metric!r} named a metric of the previous environment's evaluate(): reset "
            "(the documented rule picks one; set it again with rl_edit_config if needed)."
        )
    if isinstance(group, int) and not isinstance(group, bool):
        fitted_batch, _ = resolve_run_options(settings, options, session.environment)
        check_group_vs_batch(group, fitted_batch.batch_size)  # what rl_start_training checks
    return options, notes


def fit_after_selection(
    settings: Settings, store: SessionStore, spec: ConfigSpec, previous: EnvironmentRef | None
) -> list[str]:
    """Store the fitted run options; returns what was adjusted or reset (empty: nothing)."""
    notes: list[str] = []

    def change(session: Session) -> Session:
        options, found = fitted_options(settings, session, spec, previous)
        notes.extend(found)
        return session.model_copy(update={"run_options": options}) if found else session

    store.update(change)
    return notes
