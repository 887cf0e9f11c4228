"""The session's configuration: selected environment, typed edits, locked fields, run.yaml.

Three layers make a run's config, lowest first:
  1. the environment's own `config_init()` values (read by introspection),
  2. the agent's edits (`rl_edit_config`), validated against the environment's config class,
  3. locked infrastructure fields from `configs/locked.yaml`, which edits can never touch.
Run options (backend, model, steps, batch size, LoRA rank, learning rate, ...) sit beside them,
with per-backend defaults from `configs/run_options.yaml`.

Modules, each one job (each imports only those above it):
  options   run options, their per-backend defaults and cleaning; the locked fields
  session   the session in session.json (locked, atomic, repaired when damaged); selecting
  checks    a value's checks: a field against its schema, stored edits, group vs batch, base model
  current   the current config as an agent reads it (rl_get_current_config)
  edits     one edit (rl_edit_config), stored only when every check passes
  build     run.yaml: the exact RunConfig a run's three processes get
  fit       after a selection, carried-over run options made to fit the new environment
Above them, not re-exported here (they import the package):
  environment_service  what the environment tools do: list, select, read and edit the session
  training_cost        the estimate of the run the current config would start
"""

from mcp_rl.config.build import build_run_config, local_model_location
from mcp_rl.config.checks import clean_edits
from mcp_rl.config.current import ConfigurableField, CurrentConfig, LockedField, current_config
from mcp_rl.config.edits import EditResult, WholeConfigCheck, edit_config
from mcp_rl.config.options import (
    DERIVED,
    RUN_OPTION_NAMES,
    BackendChoice,
    LockedFields,
    RunOptions,
    clean_run_options,
    effective_backend,
    is_bundled_gem,
    locked_fields,
    resolve_run_options,
    run_option_defaults,
)
from mcp_rl.config.session import Session, SessionStore, config_revision, select_environment, unknown_environment

__all__ = [
    "DERIVED",
    "RUN_OPTION_NAMES",
    "BackendChoice",
    "ConfigurableField",
    "CurrentConfig",
    "EditResult",
    "LockedField",
    "LockedFields",
    "RunOptions",
    "Session",
    "SessionStore",
    "WholeConfigCheck",
    "build_run_config",
    "clean_edits",
    "clean_run_options",
    "config_revision",
    "current_config",
    "edit_config",
    "effective_backend",
    "is_bundled_gem",
    "local_model_location",
    "locked_fields",
    "resolve_run_options",
    "run_option_defaults",
    "select_environment",
    "unknown_environment",
]
