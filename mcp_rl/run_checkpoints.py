"""Which saved checkpoint of a run a model reference names, and where its weights are.

`run:<run_id>` is the run's newest saved weights, `run:<run_id>@<step>` those of one step. A
reference resolves from the run's own files (run.yaml, checkpoints.jsonl), so it works while the
run trains: only weights already written are ever named, never the live ones. Bad references
raise UserError saying what exists instead (the saved steps, or that none is saved yet).
Stdlib and pydantic only (the CLI, the server and the workers import this).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from pydantic import BaseModel

from mcp_rl.errors import DamagedState, NotFound, UnknownId, UserError, clip_id
from mcp_rl.runconfig import RunConfig
from mcp_rl.rundir import CHECKPOINTS_FILE, RUN_FILE, CheckpointRecord, is_run_id, read_index
from mcp_rl.settings import Settings

RUN_PREFIX = "run:"
# Tinker's OpenAI-compatible inference: a checkpoint's sampler path is the model name there
# (https://tinker-docs.thinkingmachines.ai/compatible-apis/openai).
TINKER_OPENAI_BASE_URL = "https://tinker.thinkingmachines.dev/services/tinker-prod/oai/api/v1"
# run:<run_id> or run:<run_id>@<step>
_REF = re.compile(r"^run:(?P<run>[A-Za-z0-9_-]{1,64})(?:@(?P<step>\d{1,9}))?$")
# The adapter folder inside a local state checkpoint (mcp_rl.trainer.backends.local.ADAPTER_DIR).
_ADAPTER_DIR = "adapter"


class CheckpointRef(BaseModel):
    """A run's saved weights at one step, as something to sample from."""

    run_id: str
    step: int
    backend: Literal["local", "tinker"]
    base_model: str  # run.yaml's base model: a local folder, "default" or a Tinker model name
    weights: str  # local: the PEFT adapter folder; Tinker: the tinker:// sampler path
    final: bool = False
    saved_steps: list[int] = []

    @property
    def model_id(self) -> str:
        """The reference that names exactly these weights (`run:<id>@<step>`)."""
        return f"{RUN_PREFIX}{self.run_id}@{self.step}"


def is_run_ref(model_id: str) -> bool:
    return model_id.strip().startswith(RUN_PREFIX)


def parse_run_ref(model_id: str) -> tuple[str, int | None]:
    """(`run_id`, step or None) of `run:<run_id>[@<step>]`.

    Raises:
        UserError: not of that form.
    """
    match = _REF.match(model_id.strip())
    if not match:
        raise UserError(
            f"{model_id!r} is not a run checkpoint reference. Write run:<run_id> (its newest saved "
            "weights) or run:<run_id>@<step> (a saved step); rl_list_runs lists the runs."
        )
    step = match.group("step")
    return match.group("run"), int(step) if step is not None else None


def load_run(settings: Settings, run_id: str) -> RunConfig:
    """A run's run.yaml.

    Raises:
        NotFound: no such run in this state directory.
        DamagedState: run.yaml cannot be read.
    """
    if not is_run_id(run_id):
        raise UnknownId(
            f"Unknown run {clip_id(run_id)!r}: run ids are letters, digits, '-' and '_'. rl_list_runs lists them.",
            "run_id",
            run_id,
        )
    path = settings.runs_dir / run_id / RUN_FILE
    try:
        return RunConfig.load(path)
    except FileNotFoundError:
        raise UnknownId(
            f"Unknown run {run_id!r}: there is no {RUN_FILE} under {settings.runs_dir}. rl_list_runs lists the runs.",
            "run_id",
            run_id,
        ) from None


def _weights_of(record: CheckpointRecord) -> str | None:
    """The sampling weights a record names (a state folder holds its adapter next to its state)."""
    if record.kind == "sampler":
        return record.path
    if record.path.startswith("tinker://"):
        return None  # a Tinker state is not sampleable; its sampler record names the weights
    adapter = Path(record.path) / _ADAPTER_DIR
    return str(adapter) if (adapter / "adapter_config.json").is_file() else None


def saved_weights(config: RunConfig) -> dict[int, tuple[str, bool]]:
    """step -> (weights path, final) of every saved checkpoint still there (deleted ones are
    not: rundir.read_index), newest record wins."""
    read = read_index(config.paths.checkpoints_index)
    if read.error:
        raise DamagedState(f"run {config.run_id}: {read.error}")
    found: dict[int, tuple[str, bool]] = {}
    for record in read.records:
        weights = _weights_of(record)
        if weights is None:
            continue
        if not weights.startswith("tinker://") and not (Path(weights) / "adapter_config.json").is_file():
            continue  # pruned (keep_last_checkpoints) or moved away
        previous = found.get(record.step)
        found[record.step] = (weights, record.final or (previous is not None and previous[1]))
    return found


def resolve_checkpoint(settings: Settings, run_id: str, step: int | None = None) -> CheckpointRef:
    """The saved weights of `run_id` at `step` (None: the newest).

    Raises:
        NotFound: unknown run, or no checkpoint at that step (the answer lists the saved steps).
        UserError: the run has no saved checkpoint yet, or its checkpoints are on a self-hosted
            Tinker-compatible server (every user of a Tinker checkpoint samples through hosted Tinker).
    """
    config = load_run(settings, run_id)
    self_hosted = config.trainer.self_hosted_server
    if self_hosted:
        raise UserError(
            f"Run {run_id} trained on the self-hosted Tinker-compatible server at {self_hosted}, which keeps its "
            "checkpoints: mcp-rl evaluates, smoke-tests and serves Tinker checkpoints through hosted Tinker only (not "
            "yet in the SDK dialect such servers speak). The run's own held-out figures, evaluated by its trainer on "
            "that server before its first step and after its last, are in rl_check_status and rl_get_results."
        )
    saved = saved_weights(config)
    steps = sorted(saved)
    if not steps:
        raise UserError(
            f"Run {run_id} has no saved checkpoint yet ({CHECKPOINTS_FILE} names none that is still on disk). "
            "A run saves at every save_checkpoint_interval steps and at its end; wait for one (rl_check_status), "
            "or evaluate another run."
        )
    if step is None:
        step = steps[-1]
    if isinstance(step, bool) or not isinstance(step, int) or step not in saved:
        raise NotFound(f"Run {run_id} has no saved checkpoint at step {step}. Saved steps: {_listing(steps)}.")
    weights, final = saved[step]
    backend = config.trainer.backend
    return CheckpointRef(
        run_id=run_id,
        step=step,
        backend="tinker" if backend == "tinker" else "local",
        base_model=config.trainer.base_model,
        weights=weights,
        final=final,
        saved_steps=steps,
    )


def resolve_ref(settings: Settings, model_id: str) -> CheckpointRef:
    """`run:<run_id>[@<step>]` -> its checkpoint (see `resolve_checkpoint`)."""
    run_id, step = parse_run_ref(model_id)
    return resolve_checkpoint(settings, run_id, step)


def _listing(steps: list[int]) -> str:
    if len(steps) <= 20:
        return ", ".join(str(s) for s in steps)
    return (
        ", ".join(str(s) for s in steps[:10])
        + f", ... ({len(steps) - 15} more) ..., "
        + ", ".join(str(s) for s in steps[-5:])
    )
