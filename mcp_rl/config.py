"""The session's configuration: selected environment, typed edits, locked fields, run.yaml.

Three layers make a run's config, lowest first:
  1. the environment's own `config_init()` values (read by introspection),
  2. the agent's edits (`rl_edit_config`), validated against the environment's config class,
  3. locked infrastructure fields from `configs/locked.yaml`, which edits can never touch.
Run options (backend, model, steps, batch size, LoRA rank, learning rate, ...) sit beside them,
with per-backend defaults from `configs/run_options.yaml`.

The session lives in `session.json` in the state directory, so a restarted server continues
where the last one stopped. Every change is a read-modify-write under an exclusive file lock
with an atomic replace, so concurrent servers never corrupt it.
"""

from __future__ import annotations

import difflib
import importlib.util
import json
import math
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from mcp_rl.atomic import write_text_atomic
from mcp_rl.environments.config_check import check_whole_config
from mcp_rl.environments.discovery import EnvironmentInfo
from mcp_rl.environments.introspect import ConfigSpec, FieldSpec
from mcp_rl.environments.introspect_worker import IntrospectionWorker
from mcp_rl.errors import NotFound, NotSelected, UserError, clip, clip_message
from mcp_rl.locking import exclusive_lock
from mcp_rl.runconfig import EnvironmentRef, RunConfig, RunPaths, TrainerSettings, WandbSettings
from mcp_rl.settings import Settings, configs_dir

DERIVED = "derived"
BackendChoice = Literal["auto", "local", "tinker"]


# --- run options ---------------------------------------------------------------------------
class RunOptions(BaseModel):
    """Run-level settings the agent may edit; defaults depend on the backend."""

    # NaN and infinity are bad input like any other invalid number (JSON cannot even store them).
    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)

    backend: BackendChoice = Field("auto", description="auto: tinker when TINKER_API_KEY is set, else local.")
    base_model: str = Field(
        description='local: "default" (embedded SmolLM2-135M-Instruct) or a local Hugging Face model folder; '
        "tinker: a Tinker model name such as Qwen/Qwen3-8B."
    )
    total_steps: int = Field(ge=1, le=1_000_000, description="Training steps (batches) in the run.")
    batch_size: int = Field(ge=1, le=65_536, description="Sequences per step; a multiple of group_size.")
    lora_rank: int = Field(ge=1, le=512, description="LoRA rank.")
    learning_rate: float = Field(gt=0, le=1, description="Adam learning rate.")
    adam_beta1: float = Field(ge=0, lt=1, description="Adam beta1.")
    adam_beta2: float = Field(ge=0, lt=1, description="Adam beta2.")
    max_token_trainer_length: int = Field(ge=16, le=1_000_000, description="Longest sequence the trainer takes.")
    save_checkpoint_interval: int = Field(
        ge=0, description="Save a resumable checkpoint every N steps (0: final only)."
    )
    wandb_project: str = Field(min_length=1, description="W&B project (used when W&B is configured).")
    eval_every: int = Field(
        0,
        ge=0,
        le=1_000_000,
        description="Evaluate on the held-out items every N steps, besides before the first step and after the "
        "last (0: only those two).",
    )
    keep_last_checkpoints: int = Field(
        3,
        ge=0,
        le=10_000,
        description="Local checkpoints kept besides the final and the kept ones (0: keep every one).",
    )
    max_cost_usd: float | None = Field(
        None,
        gt=0,
        le=1_000_000,
        description="Paid backends: end the run (stopped, checkpoint kept) before a step would pass this estimated "
        "USD spend. None: no cap.",
    )
    start_from: str | None = Field(
        None,
        pattern=r"^[A-Za-z0-9_-]{1,64}(@[0-9]{1,9})?$",
        description="RUN_ID or RUN_ID@STEP: start from that earlier run's checkpoint (its newest, or STEP's; same "
        "base model and LoRA rank) instead of the base model. None: the base model.",
    )
    advantage_normalization: Literal["group_std", "mean_center"] = Field(
        "group_std",
        description="GRPO advantages: group_std divides each group's centred scores by their std; mean_center only "
        "subtracts the group mean.",
    )

    launcher: Literal["local", "slurm", "ray"] = Field(
        "local",
        description="Where the run's supervisor runs: local (this machine), slurm (one sbatch job) or ray (one Ray "
        "job). Cluster jobs need the run folder on a filesystem the cluster shares and mcp-rl at the same path (or "
        "cluster_venv).",
    )
    gpus: int = Field(0, ge=0, le=64, description="slurm/ray: GPUs the job asks for (one node).")
    partition: str | None = Field(
        None, pattern=r"^[A-Za-z0-9_.,-]{1,128}$", description="slurm: the partition (None: the cluster's default)."
    )
    account: str | None = Field(
        None, pattern=r"^[A-Za-z0-9_.-]{1,128}$", description="slurm: the account charged (None: your default)."
    )
    time_limit_minutes: int | None = Field(
        None,
        ge=1,
        le=525_600,
        description="slurm: the job's time limit; the run is stopped gently (final checkpoint kept) before it.",
    )
    ray_address: str | None = Field(
        None,
        pattern=r"^https?://[A-Za-z0-9_.:\[\]-]{1,253}$",
        description="ray: the Ray dashboard's address, e.g. http://127.0.0.1:8265 (None: that one).",
    )
    cluster_venv: str | None = Field(
        None,
        pattern=r"^/[^\n\x00]{0,1000}$",
        description="slurm/ray: the venv (absolute path on the cluster) whose python runs the job; None: this "
        "server's own interpreter at the same path.",
    )

    tinker_base_url: str | None = Field(
        None,
        pattern=r"^https?://[A-Za-z0-9_.:\[\]/-]{1,500}$",
        description="tinker: a self-hosted Tinker-compatible server (SkyRL's Tinker API, TuFT), e.g. "
        "http://127.0.0.1:8000. None: TINKER_BASE_URL, else hosted Tinker.",
    )
    tinker_sdk: Literal["auto", "0.38", "0.25"] = Field(
        "auto",
        description="tinker: the SDK the trainer speaks: 0.38 (hosted Tinker), 0.25 (SkyRL, TuFT; installed on first "
        "use), auto (asked of the server).",
    )

    @field_validator(
        "total_steps",
        "eval_every",
        "keep_last_checkpoints",
        "max_cost_usd",
        "batch_size",
        "lora_rank",
        "learning_rate",
        "adam_beta1",
        "adam_beta2",
        "max_token_trainer_length",
        "save_checkpoint_interval",
        "gpus",
        "time_limit_minutes",
        mode="before",
    )
    @classmethod
    def _not_a_boolean(cls, value: Any) -> Any:
        # pydantic reads true as 1; an agent sending total_steps=true meant something else.
        if isinstance(value, bool):
            raise ValueError(f"expected a number, got the boolean {value}")
        return value


RUN_OPTION_NAMES = tuple(RunOptions.model_fields)


@lru_cache(maxsize=1)
def _yaml(name: str) -> dict[str, Any]:
    with open(configs_dir() / name, encoding="utf-8") as fh:
        return yaml.safe_load(fh) or {}


def effective_backend(settings: Settings, choice: str) -> Literal["local", "tinker"]:
    if choice == "auto":
        return "tinker" if settings.default_backend == "tinker" else "local"
    return "tinker" if choice == "tinker" else "local"


def run_option_defaults(settings: Settings, backend: str, environment: EnvironmentRef | None = None) -> dict[str, Any]:
    """The backend's defaults; the bundled GEM environment adds its recipe's (`<backend>_gem`)."""
    table = _yaml("run_options.yaml")
    defaults = dict(table[backend])
    if environment is not None and is_bundled_gem(environment):
        defaults.update(table.get(f"{backend}_gem") or {})
    if settings.wandb_project:
        defaults["wandb_project"] = settings.wandb_project
    return defaults


def is_bundled_gem(environment: EnvironmentRef) -> bool:
    return environment.file_path.name == "gem_env.py" and environment.class_name == "GemEnv"


def resolve_run_options(
    settings: Settings, edits: dict[str, Any], environment: EnvironmentRef | None = None
) -> tuple[RunOptions, dict[str, Any]]:
    """The effective run options and the defaults they were built on (strict: a bad edit raises)."""
    backend = effective_backend(settings, edits.get("backend", "auto"))
    defaults = {"backend": "auto", **run_option_defaults(settings, backend, environment)}
    return RunOptions.model_validate({**defaults, **edits}), defaults


def clean_run_options(settings: Settings, stored: Any) -> tuple[dict[str, Any], list[str]]:
    """Stored run options with unknown names dropped and bad values reset to their defaults.

    session.json may have been written by another version of mcp-rl or edited by hand; one bad
    option must not make every config tool fail. Each repair is described in a note.
    """
    if not isinstance(stored, dict):
        return {}, [
            f"run_options in session.json was not a mapping ({clip(stored)}); all run options are at their defaults."
        ]
    options = dict(stored)
    notes: list[str] = []
    for name in [n for n in options if n not in RUN_OPTION_NAMES]:
        notes.append(f"Unknown run option {clip(name)} in session.json was ignored (value {clip(options.pop(name))}).")
    if "backend" in options and options["backend"] not in ("auto", "local", "tinker"):
        notes.append(f"Run option backend had a bad value {clip(options.pop('backend'))}; reset to its default 'auto'.")
    # Each value alone against the defaults: a bad one is named and dropped, the others kept.
    for _ in range(len(RUN_OPTION_NAMES)):
        try:
            resolve_run_options(settings, options)
            break
        except ValidationError as exc:
            bad = {str(err["loc"][0]) for err in exc.errors() if err["loc"] and err["loc"][0] in options}
            if not bad:
                raise
            for name in sorted(bad):
                value = options.pop(name)
                detail = "; ".join(e["msg"] for e in exc.errors() if e["loc"] and e["loc"][0] == name)
                notes.append(
                    f"Run option {name} had a bad value {clip(value)} in session.json ({detail}); reset to its default."
                )
    return options, notes


def clean_edits(spec: ConfigSpec, stored: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """Stored environment edits that still fit the environment's fields; the others are dropped
    (back to the environment's own value) with a note."""
    edits: dict[str, Any] = {}
    notes: list[str] = []
    for name, value in stored.items():
        field_spec = spec.field(name)
        if field_spec is None:
            notes.append(f"Edit of unknown field {clip(name)} in session.json was ignored (value {clip(value)}).")
            continue
        try:
            edits[name] = _validate_field(field_spec, value)
        except UserError:
            notes.append(
                f"Edit {name}={clip(value)} in session.json is not valid for the environment; "
                f"{name} is back to {field_spec.initial!r}."
            )
    return edits, notes


# --- locked fields --------------------------------------------------------------------------
class LockedFields(BaseModel):
    env: dict[str, Any]
    openai: dict[str, Any]


def locked_fields(backend: str) -> LockedFields:
    raw = _yaml("locked.yaml")
    profile = (raw.get("profiles") or {}).get(backend) or {}
    return LockedFields(
        env={**raw.get("env", {}), **profile.get("env", {})},
        openai={**raw.get("openai", {}), **profile.get("openai", {})},
    )


# --- the session ----------------------------------------------------------------------------
class Session(BaseModel):
    """What one agent has chosen so far. Persisted as session.json."""

    environment: EnvironmentRef | None = None
    edits: dict[str, Any] = {}
    run_options: dict[str, Any] = {}
    selected_at: float | None = None
    # What reading session.json had to repair (never written back; shown in the answers).
    notes: list[str] = Field(default_factory=list, exclude=True)


class SessionStore:
    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._path = settings.session_file
        self._lock_path = settings.session_file.with_suffix(".lock")

    def _locked(self) -> AbstractContextManager[None]:
        return exclusive_lock(self._lock_path)

    def _keep_aside(self) -> Path:
        """Move the damaged session.json aside (never deleted) and say where it went."""
        aside = self._path.with_name(f"session.damaged-{time.strftime('%Y%m%dT%H%M%S')}-{time.time_ns() % 10**9}.json")
        self._path.replace(aside)
        return aside

    def _kept_aside_note(self) -> list[str]:
        """No session.json, but a damaged one was kept aside: the read that repaired it may have been
        another call's (a server's start-up), so every read until the next selection says so."""
        kept = sorted(self._path.parent.glob("session.damaged-*.json"), key=lambda p: p.name)
        if not kept:
            return []
        return [
            f"session.json was damaged and kept as {kept[-1]}; a fresh session started. "
            "Select an environment again with rl_select_environment."
        ]

    def _read_unlocked(self) -> Session:
        try:
            raw = self._path.read_bytes()
        except FileNotFoundError:
            return Session(notes=self._kept_aside_note())
        except OSError as exc:  # a directory, unreadable, ...
            aside = self._keep_aside()
            return Session(
                notes=[
                    f"session.json could not be read ({exc.strerror or exc}); it was moved to {aside}. "
                    "Select an environment again with rl_select_environment."
                ]
            )
        try:
            data = json.loads(raw.decode("utf-8"))
            if not isinstance(data, dict):
                raise ValueError(f"a JSON {type(data).__name__}, not an object")
        except ValueError as exc:
            # Never lose it silently: keep the damaged file beside the fresh session.
            aside = self._keep_aside()
            return Session(
                notes=[
                    f"session.json was damaged ({clip_message(str(exc), 200)}); it was moved to {aside} and a "
                    "fresh session started. Select an environment again with rl_select_environment."
                ]
            )
        return self._salvage(data)

    def _salvage(self, data: dict[str, Any]) -> Session:
        """Keep every part of a parsed session that is valid; each part dropped gets a note."""
        notes: list[str] = []
        session = Session()
        for key in ("environment", "edits", "selected_at"):
            if key not in data:
                continue
            try:
                session = Session.model_validate({**session.model_dump(), key: data[key]})
            except ValidationError:
                notes.append(f"{key} in session.json was not valid ({clip(data[key])}) and was ignored.")
        if session.environment is None and session.edits:
            session = session.model_copy(update={"edits": {}})
        run_options, option_notes = clean_run_options(self._settings, data.get("run_options", {}))
        unknown = sorted(set(data) - set(Session.model_fields))
        if unknown:
            notes.append(f"Unknown keys {', '.join(map(clip, unknown))} in session.json were ignored.")
        return session.model_copy(update={"run_options": run_options, "notes": notes + option_notes})

    def read(self) -> Session:
        with self._locked():
            return self._read_unlocked()

    def update(self, change: Callable[[Session], Session]) -> Session:
        """Apply `change` to the current session atomically; if it raises, nothing is written.

        A session that needed repairs is kept aside before the repaired one replaces it.
        """
        with self._locked():
            current = self._read_unlocked()
            new = change(current)
            if current.notes and self._path.is_file():
                aside = self._path.with_name(f"session.before-repair-{time.strftime('%Y%m%dT%H%M%S')}.json")
                aside.write_bytes(self._path.read_bytes())
            write_text_atomic(self._path, new.model_dump_json(indent=2))
            return new


# --- reading the current config -------------------------------------------------------------
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


# --- editing --------------------------------------------------------------------------------
class EditResult(BaseModel):
    message: str
    field: str
    value: Any
    previous_value: Any = None
    kind: Literal["environment", "run_option"]


def _coerce(value: Any) -> Any:
    """Agents often send numbers and booleans as strings; read them as JSON/YAML scalars."""
    if isinstance(value, str):
        try:
            return yaml.safe_load(value)
        except (yaml.YAMLError, ValueError):  # ValueError: an integer of more than 4300 digits
            return value
    return value


def _validate_field(spec: FieldSpec, value: Any) -> Any:
    import jsonschema  # only needed when editing; keeps server start-up light

    validator = jsonschema.Draft202012Validator(spec.json_schema)
    candidates = [value]
    coerced = _coerce(value)
    if coerced is not value and coerced != value:
        candidates.append(coerced)
    if isinstance(value, dict | list) and "string" in _schema_types(spec.json_schema):
        candidates.append(json.dumps(value))  # a field that holds JSON text, given the object itself
    # The value as the agent meant it (the coerced one, when it differs) says best what is wrong.
    last_error = ""
    for candidate in candidates:
        if not _finite(candidate):
            last_error = "not a finite number (NaN and infinity are refused)"
            continue
        errors = sorted(validator.iter_errors(candidate), key=lambda e: e.path)
        if not errors:
            return _as_int_if_meant(spec.json_schema, candidate)
        last_error = clip_message(errors[0].message, 300)
    if isinstance(value, str) and not _finite(_float_or_none(value)):
        last_error = "not a finite number (NaN and infinity are refused)"  # 'inf', 'NaN', 'Infinity'
    expected = spec.type or spec.json_schema.get("type", "?")
    raise UserError(
        f"Invalid value {clip(value)} for {spec.name} (type {expected}): {last_error}. Nothing was changed."
    )


def _as_int_if_meant(schema: dict[str, Any], value: Any) -> Any:
    """A whole float (3.0, 1e63) for a field that takes integers and no other numbers, as the integer.

    JSON schema counts 3.0 as an integer, but the config class may not parse it (pydantic refuses
    floats beyond 64 bits), and run.yaml should hold what the field's type says."""
    if isinstance(value, float) and value.is_integer():
        types = _schema_types(schema)
        if "integer" in types and "number" not in types:
            return int(value)
    return value


def _schema_types(schema: Any) -> set[str]:
    """Every `type` named in a field's schema, through anyOf/oneOf/allOf."""
    if not isinstance(schema, dict):
        return set()
    kind = schema.get("type")
    types = set(kind) if isinstance(kind, list) else {kind} if isinstance(kind, str) else set()
    for key in ("anyOf", "oneOf", "allOf"):
        for sub in schema.get(key) or []:
            types |= _schema_types(sub)
    return types


def _float_or_none(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _finite(value: Any) -> bool:
    """False if `value` is or holds a NaN or an infinity (JSON schema lets them through as numbers)."""
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(_finite(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return all(_finite(v) for v in value)
    return True


def _check_group_vs_batch(group_size: Any, batch_size: Any, *, previous_group: Any = None) -> None:
    """Refuse a group_size that does not divide batch_size, naming the edits that get there.

    `previous_group` is given when group_size is the field being edited: moving from group 16 to 24
    with batch 16 fails in either order, so the message names the batch that works for both.
    """
    if not isinstance(group_size, int) or not isinstance(batch_size, int):
        return
    if group_size < 2:
        raise UserError(f"group_size must be at least 2 (got {group_size}): GRPO compares answers within a group.")
    if batch_size % group_size == 0:
        return
    if isinstance(previous_group, int) and previous_group >= 1:
        bridge = math.lcm(previous_group, group_size)
        how = (
            f"First set batch_size to {bridge} (a multiple of both {previous_group} and {group_size}), "
            f"then group_size to {group_size}; then batch_size to any multiple of {group_size}."
        )
    else:
        below = batch_size // group_size * group_size
        options = [n for n in (below, below + group_size) if n >= group_size]
        how = f"Use a multiple of {group_size}, such as {' or '.join(map(str, options))}, or change group_size first."
    raise UserError(
        f"batch_size ({batch_size}) must be a multiple of group_size ({group_size}). {how} Nothing was changed."
    )


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
) -> EditResult:
    """Validate one edit and persist it; on any error nothing changes.

    Each field is checked against its JSON schema here, then the whole resulting config by the
    config class's own validators (which a schema cannot express), in a child process unless
    introspection found none (a fork of the server's warm introspection `worker` when there is
    one); `whole_config_check` replaces that child (tests).
    """

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
            new_options[field] = (
                _coerce(value)
                if not isinstance(value, str) or field not in ("base_model", "wandb_project", "backend", "start_from")
                else value
            )
            try:
                resolved, _ = resolve_run_options(settings, new_options, session.environment)
            except ValidationError as exc:
                detail = "; ".join(err["msg"] for err in exc.errors())
                raise UserError(
                    f"Invalid value {clip(value)} for run option {field}: {detail}. Nothing was changed."
                ) from None
            new_options[field] = resolved.model_dump(mode="json")[field]  # stored as answered: 1.0 is kept as 1
            group = edits.get("group_size", _initial(spec, "group_size"))
            _check_group_vs_batch(group, resolved.batch_size)
            if field == "base_model":
                _check_base_model(settings, resolved)
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
        checked = _validate_field(field_spec, value)
        if field == "group_size":
            previous_group = edits.get("group_size", _initial(spec, "group_size"))
            _check_group_vs_batch(checked, options.batch_size, previous_group=previous_group)
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

    session = store.update(change)
    edit = result["r"]
    if session.notes:
        edit.message += " Repairs of the stored session: " + " ".join(session.notes)
    return edit


def _initial(spec: ConfigSpec, name: str) -> Any:
    field = spec.field(name)
    return field.initial if field else None


def local_model_location(settings: Settings, base_model: str) -> Path:
    """Where a local-backend model lives (the default one is converted there before training)."""
    from mcp_rl.models import DEFAULT_MODEL, default_model_dir  # paths only; no torch

    if base_model == DEFAULT_MODEL:
        return settings.model_path or default_model_dir(settings)
    return Path(base_model).expanduser().resolve()


def _check_base_model(settings: Settings, options: RunOptions) -> None:
    backend = effective_backend(settings, options.backend)
    if backend == "local" and options.base_model != "default":
        folder = Path(options.base_model).expanduser()
        if not (folder / "config.json").is_file():
            raise UserError(
                f"base_model {options.base_model!r} is not a local Hugging Face model folder (no config.json). "
                'Use "default" for the embedded SmolLM2-135M-Instruct or give the path of a model folder. '
                "Nothing is downloaded from a hub."
            )


# --- selecting ------------------------------------------------------------------------------
def select_environment(store: SessionStore, env: EnvironmentInfo) -> Session:
    """Select an environment: edits reset to its own defaults, run options are kept."""
    ref = EnvironmentRef(
        name=env.name, class_name=env.class_name, file_path=env.file_path, project_root=env.project_root
    )
    return store.update(lambda s: s.model_copy(update={"environment": ref, "edits": {}, "selected_at": time.time()}))


def unknown_environment(name: str, available: list[str]) -> NotFound:
    # A name far longer than any environment's matches none (and would make difflib slow).
    close = difflib.get_close_matches(name, available, n=1, cutoff=0.4) if len(name) <= 200 else []
    hint = f" Closest match: {close[0]!r}." if close else ""
    listing = ", ".join(available) if available else "(none found; check MCP_RL_ENV_PATHS)"
    return NotFound(f"Unknown environment {clip(name)}.{hint} Available: {listing}.")


# --- rendering run.yaml ---------------------------------------------------------------------
def build_run_config(settings: Settings, session: Session, spec: ConfigSpec, run_id: str) -> RunConfig:
    """The exact config a run's three processes get (ports are filled in by the supervisor)."""
    if session.environment is None:
        raise NotSelected("No environment selected. Call rl_select_environment(name) first.")
    options, _ = resolve_run_options(settings, session.run_options, session.environment)
    backend = effective_backend(settings, options.backend)
    if backend == "tinker" and settings.tinker_api_key is None:
        raise UserError(
            "backend is 'tinker' but TINKER_API_KEY is not set. Set the key, or rl_edit_config('backend', 'local')."
        )
    if backend == "local" and importlib.util.find_spec("torch") is None:
        raise UserError("The local backend needs torch: pip install 'mcp-rl[local]' (CPU build: torch==2.13.0).")
    _check_base_model(settings, options)
    edits, _ = clean_edits(spec, session.edits)
    env_values = {**spec.initial_values, **edits}
    group_size = env_values.get("group_size")
    _check_group_vs_batch(group_size, options.batch_size)
    if isinstance(group_size, int) and group_size > options.batch_size:
        raise UserError(f"group_size ({group_size}) is larger than batch_size ({options.batch_size}).")

    model_ref = str(local_model_location(settings, options.base_model)) if backend == "local" else options.base_model
    # On Tinker the model is a hub id; MCP_RL_TOKENIZER_PATH names a local copy of its tokenizer,
    # which the environment then loads too (else it fetches it from the hub, as the trainer does).
    tokenizer_ref = str(settings.tokenizer_path) if backend == "tinker" and settings.tokenizer_path else model_ref
    locked = locked_fields(backend)
    derived_env = {
        "tokenizer_name": tokenizer_ref,
        "rollout_server_url": None,  # set by RunConfig.with_ports when the supervisor picks ports
        "use_wandb": settings.wandb_enabled,
        "wandb_name": f"{session.environment.name}-{run_id}",
        "total_steps": options.total_steps,
        "batch_size": options.batch_size,
        "data_path_to_save_groups": None,
    }
    for name, value in locked.env.items():
        env_values[name] = derived_env[name] if value == DERIVED else value
    known = {f.name for f in spec.fields}
    env_section = {k: v for k, v in env_values.items() if k in known}
    derived_openai = {"model_name": model_ref, "base_url": None}
    server = {name: derived_openai[name] if value == DERIVED else value for name, value in locked.openai.items()}
    server["tokenizer_name"] = tokenizer_ref
    run_dir = settings.runs_dir / run_id
    return RunConfig(
        run_id=run_id,
        environment=session.environment,
        paths=RunPaths.for_run(run_dir),
        env=env_section,
        openai=[server],
        trainer=TrainerSettings(
            backend=backend,
            base_model=model_ref,
            tokenizer_path=model_ref
            if backend == "local"
            else (str(settings.tokenizer_path) if settings.tokenizer_path else None),
            num_steps=options.total_steps,
            batch_size=options.batch_size,
            group_size=int(group_size) if isinstance(group_size, int) else 2,
            lora_rank=options.lora_rank,
            learning_rate=options.learning_rate,
            adam_beta1=options.adam_beta1,
            adam_beta2=options.adam_beta2,
            max_token_trainer_length=options.max_token_trainer_length,
            save_checkpoint_interval=options.save_checkpoint_interval,
            eval_every=options.eval_every,
            keep_last_checkpoints=options.keep_last_checkpoints,
            max_cost_usd=options.max_cost_usd,
            advantage_normalization=options.advantage_normalization,
            tinker_base_url=options.tinker_base_url,
            tinker_sdk=options.tinker_sdk,
            wandb=WandbSettings(
                enabled=settings.wandb_enabled,
                project=options.wandb_project,
                entity=settings.wandb_entity,
                group=run_id,
            ),
        ),
    )
