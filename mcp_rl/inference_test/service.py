"""Starting inference tests, waiting on them with progress, reading their results.

A test runs in a detached worker (own session, see `runner`), so it keeps going when the MCP
server exits or the tool call is abandoned; everything about it is in `tests/<test_id>/`, so any
later server reads it. No MCP types here: the adapter is `mcp_rl.server.inference_tools`.
"""

from __future__ import annotations

import math
import os
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any, Literal

import yaml

from mcp_rl import background, config
from mcp_rl.background import start_worker, worker_alive
from mcp_rl.errors import NotFound, UnknownId, UserError, clip_id
from mcp_rl.inference_test import report
from mcp_rl.inference_test.models import (
    FINAL_MODEL_STATES,
    LOCAL_SERVER_GLOB,
    MODEL_HTML,
    MODEL_JSONL,
    MODEL_LOG,
    SLUG_RE,
    SPEC_FILE,
    SUMMARY_FILE,
    TEST_ID_RE,
    WORKER_LOG,
    InferenceTestResult,
    ModelResult,
    TestSpec,
    WorkerRecord,
    test_uri,
)
from mcp_rl.model_specs import ModelSpec, model_slug
from mcp_rl.models import resolve_model
from mcp_rl.processes import marker_for, stop_group
from mcp_rl.run_checkpoints import is_run_ref, parse_run_ref, resolve_checkpoint, resolve_ref
from mcp_rl.runconfig import EnvironmentRef
from mcp_rl.rundir import checkpoint_lock, lease_checkpoint
from mcp_rl.settings import Settings, configs_dir

LOCAL_MODEL_ID = "local"
DEFAULT_MAX_PARALLEL = 3
DEFAULT_MODEL_TIMEOUT_S = 600.0
MAX_MODELS = 8
NUM_STEPS_RANGE = (1, 20)
GROUP_SIZE_RANGE = (1, 64)

ProgressCallback = Callable[[float, float, str], Awaitable[None]]
FileKind = Literal["jsonl", "html", "log"]
_FILES: dict[str, str] = {"jsonl": MODEL_JSONL, "html": MODEL_HTML, "log": MODEL_LOG}


# --- which models ---------------------------------------------------------------------------
def _catalog_yaml() -> dict[str, Any]:
    return yaml.safe_load((configs_dir() / "test_models.yaml").read_text(encoding="utf-8"))


def _options(entry: dict[str, Any]) -> dict[str, Any]:
    """The gateway options of one test_models.yaml entry (only the keys it sets)."""
    keys = ("reasoning", "min_max_tokens", "request_budget", "token_budget")
    return {k: entry[k] for k in keys if k in entry}


def model_catalog() -> tuple[list[ModelSpec], ModelSpec]:
    """The default OpenRouter models and the local entry, from configs/test_models.yaml."""
    raw = _catalog_yaml()
    remote = [
        ModelSpec(
            id=m["id"], name=m["name"], scale=m["scale"], provider="openrouter", slug=model_slug(m["id"]), **_options(m)
        )
        for m in raw["openrouter"]
    ]
    loc = raw["local"]
    return remote, ModelSpec(
        id=LOCAL_MODEL_ID, name=loc["name"], scale=loc["scale"], provider="local", slug=LOCAL_MODEL_ID
    )


# Turns a multi-turn environment's episode may take when its config sets no limit (the game's
# own limit applies, which only the environment process knows): what a test's budget assumes.
UNLIMITED_TURNS_BUDGET = 10


def requests_per_group(env_config: dict[str, Any], group_size: int) -> int:
    """Requests one group of the test may make. One per answer; a multi-turn environment (its config
    has `max_turns`, as GemEnv's) asks once per turn of each episode, and plays its episodes
    `num_envs` at a time, so a group may hold a round more than it keeps."""
    if "max_turns" not in env_config:
        return group_size
    turns = env_config["max_turns"]
    if not isinstance(turns, int) or turns < 1:
        turns = UNLIMITED_TURNS_BUDGET
    at_once = env_config.get("num_envs")
    episodes = math.ceil(group_size / at_once) * at_once if isinstance(at_once, int) and at_once > 0 else group_size
    return episodes * turns


def with_budgets(models: list[ModelSpec], num_steps: int, per_group: int) -> list[ModelSpec]:
    """Each model's request and token budget: what the test needs (`per_group` requests a step,
    see `requests_per_group`) plus a small margin, unless configs/test_models.yaml sets them."""
    budgets = _catalog_yaml().get("budgets") or {}
    planned = num_steps * per_group
    margin = max(
        int(budgets.get("min_request_margin", 4)), math.ceil(planned * float(budgets.get("request_margin", 0.25)))
    )
    per_request = int(budgets.get("tokens_per_request", 4096))
    out = []
    for m in models:
        requests = m.request_budget or planned + margin
        out.append(
            m.model_copy(update={"request_budget": requests, "token_budget": m.token_budget or requests * per_request})
        )
    return out


def plan_models(settings: Settings, models: list[str] | None) -> list[ModelSpec]:
    """The models a test runs: the defaults, or exactly the ids asked for (none dropped).

    Raises:
        UserError: an OpenRouter id without OPENROUTER_API_KEY, too many or empty ids.
    """
    remote, local = model_catalog()
    has_key = settings.openrouter_api_key is not None
    if not models:
        return remote if has_key else [local]
    ids: list[str] = []
    for raw in models:
        model_id = raw.strip()
        if not model_id:
            raise UserError(
                "models contains an empty id. Give OpenRouter ids such as 'qwen/qwen3-8b', 'local', or a run's "
                "checkpoint as 'run:<run_id>' or 'run:<run_id>@<step>'."
            )
        if model_id not in ids:
            ids.append(model_id)
    if len(ids) > MAX_MODELS:
        raise UserError(f"At most {MAX_MODELS} models per test (got {len(ids)}); split them over several tests.")
    known = {m.id: m for m in remote}
    planned: list[ModelSpec] = []
    slugs: set[str] = set()
    for model_id in ids:
        if model_id == LOCAL_MODEL_ID:
            spec = local
        elif is_run_ref(model_id):
            spec = checkpoint_model(settings, model_id)
        else:
            if not has_key:
                raise UserError(
                    f"Model {model_id!r} is an OpenRouter model, but OPENROUTER_API_KEY is not set. "
                    "Set it in the server's environment, or test with models=['local'] (the embedded default model, no key needed)."
                )
            spec = known.get(model_id) or ModelSpec(
                id=model_id,
                name=model_id,
                scale="custom",
                provider="openrouter",
                slug=model_slug(model_id),
                **_options(_catalog_yaml().get("openrouter_defaults") or {}),
            )
        slug, n = spec.slug, 2
        while slug in slugs:  # two ids that differ only in punctuation
            slug, n = f"{spec.slug}-{n}", n + 1
        slugs.add(slug)
        planned.append(spec.model_copy(update={"slug": slug}))
    return planned


def checkpoint_model(settings: Settings, model_id: str) -> ModelSpec:
    """A run's saved checkpoint (`run:<run_id>[@<step>]`) as a local model: base + its adapter.

    Raises:
        UserError: unknown run or step (the saved steps listed), no checkpoint yet, a Tinker run.
    """
    ref = resolve_ref(settings, model_id)
    if ref.backend != "local":
        raise UserError(
            f"{model_id} is a Tinker run's checkpoint ({ref.weights}); smoke tests serve local checkpoints only. "
            "Evaluate it with rl_evaluate_checkpoint, or sample it through Tinker's OpenAI-compatible endpoint."
        )
    base = resolve_model(settings, ref.base_model)
    return ModelSpec(
        id=ref.model_id,
        name=f"run {ref.run_id} at step {ref.step}",
        scale="checkpoint",
        provider="local",
        slug=model_slug(ref.model_id),
        adapter=ref.weights,
        base_model=str(base),
    )


# --- the selected environment ---------------------------------------------------------------
def session_environment(environments: Any) -> tuple[EnvironmentRef, dict[str, Any]]:
    """The session's environment and its config as a test uses it: config_init values, the
    agent's edits, then the locked fields of the session's backend (`derived` ones are the
    worker's business). `environments` is the server's EnvironmentService.

    Raises:
        UserError: no environment selected, or its file is gone.
    """
    session, spec = environments.selected()
    values: dict[str, Any] = {**spec.initial_values, **session.edits}
    options, _ = config.resolve_run_options(environments.settings, session.run_options)
    backend = config.effective_backend(environments.settings, options.backend)
    for name, value in config.locked_fields(backend).env.items():
        if value != config.DERIVED:
            values[name] = value
    # The tokenizer a run would use is its base model's (the worker falls back to the local
    # model's when that one is not on this machine).
    values["tokenizer_name"] = (
        str(config.local_model_location(environments.settings, options.base_model))
        if backend == "local"
        else options.base_model
    )
    known = {f.name for f in spec.fields}
    return session.environment, {k: v for k, v in values.items() if k in known}


# --- starting -------------------------------------------------------------------------------
def new_test_id() -> str:
    return background.new_job_id()


def _check_range(name: str, value: int, bounds: tuple[int, int]) -> None:
    low, high = bounds
    if not low <= value <= high:
        raise UserError(f"{name} must be between {low} and {high} (got {value}).")


def start_test(
    settings: Settings,
    environment: EnvironmentRef,
    env_config: dict[str, Any],
    *,
    num_steps: int = 3,
    group_size: int = 16,
    models: list[str] | None = None,
    max_parallel: int = DEFAULT_MAX_PARALLEL,
    model_timeout_s: float = DEFAULT_MODEL_TIMEOUT_S,
    local_server_timeout_s: float = 300.0,
) -> InferenceTestResult:
    """Write the test's spec and start its detached worker; returns the initial result at once.

    Raises:
        UserError: bad ranges or models (see `plan_models`).
    """
    _check_range("num_steps", num_steps, NUM_STEPS_RANGE)
    _check_range("group_size", group_size, GROUP_SIZE_RANGE)
    if max_parallel < 1:
        raise UserError("max_parallel must be at least 1.")
    planned = with_budgets(plan_models(settings, models), num_steps, requests_per_group(env_config, group_size))
    # costs imports this package's models; only a start prices its models
    from mcp_rl.costs.openrouter import price_models

    planned = price_models(settings, planned)
    # An MCP task's paid judge scores each group each model plays (the estimate reads prices)
    from mcp_rl.config.training_cost import task_judge_estimate

    judge = task_judge_estimate(settings, env_config.get("task_file"), group_size, num_steps * len(planned), 0)
    settings.ensure_home()
    test_id = new_test_id()
    test_dir = settings.tests_dir / test_id
    test_dir.mkdir(mode=0o700)
    spec = TestSpec(
        test_id=test_id,
        created_at=time.time(),
        environment=environment,
        env_config=env_config,
        num_steps=num_steps,
        group_size=group_size,
        models=planned,
        max_parallel=max_parallel,
        model_timeout_s=model_timeout_s,
        local_server_timeout_s=local_server_timeout_s,
        openrouter_base_url=settings.openrouter_base_url,
        # The worker reads no MCP_RL_MODEL of ours: the choice travels in the spec.
        local_model=str(settings.model_path) if settings.model_path else "default",
        use_wandb=settings.wandb_enabled,
        tokenizer=env_config.get("tokenizer_name") if isinstance(env_config.get("tokenizer_name"), str) else None,
        judge_cost=judge["summary"] if judge else None,
    )
    spec.dump(test_dir / SPEC_FILE)
    initial = report.build_result(
        spec, [report.initial_result(spec, m, test_dir / m.slug) for m in planned], test_dir, spec.created_at, "running"
    )
    initial.dump(test_dir / SUMMARY_FILE)
    argv = [sys.executable, "-m", "mcp_rl.inference_test", "--test-dir", str(test_dir)]
    with ExitStack() as held:
        # A run's checkpoint under test is leased to the worker for its life (retention and
        # rl_delete_checkpoint leave it alone until the test has ended, however it ends); one
        # deleted since it was planned is refused here.
        leases = [held.enter_context(_leased(settings, m, test_id)) for m in sorted(planned, key=lambda m: m.id)]
        # The worker and everything it starts carry the test's marker: only those may be signalled.
        start_worker(
            argv,
            test_dir,
            test_dir / WORKER_LOG,
            settings.child_env(),
            cwd=test_dir,
            marker=marker_of_test(test_dir),
            pass_fds=[fd for fd in leases if fd is not None],
        )
    return initial


@contextmanager
def _leased(settings: Settings, model: ModelSpec, test_id: str) -> Iterator[int | None]:
    """Under the run's checkpoint lock, a lease on the run checkpoint `model` serves (None for a
    model that is not one), open until the worker has been handed it."""
    if model.adapter is None or not is_run_ref(model.id):
        yield None
        return
    ref = parse_run_ref(model.id)
    run_dir = settings.runs_dir / ref[0]
    with checkpoint_lock(run_dir):
        resolve_checkpoint(settings, ref[0], ref[1])  # deleted or pruned since the plan: refused
        fd = lease_checkpoint(run_dir, model.adapter, f"test {test_id} {model.slug}")
        try:
            yield fd
        finally:
            os.close(fd)


def marker_of_test(folder: Path) -> str:
    """The marker of a test's processes (the worker's, inherited by its children): derived from
    the test's folder, so any later server can prove a process is the test's before signalling."""
    return marker_for("test", folder)


# --- reading --------------------------------------------------------------------------------
def test_dir(settings: Settings, test_id: str) -> Path:
    """The folder of an existing test.

    Raises:
        NotFound: malformed or unknown id.
    """
    path = settings.tests_dir / test_id
    if not TEST_ID_RE.match(test_id) or not (path / SPEC_FILE).is_file():
        raise UnknownId(
            f"Unknown test_id {clip_id(test_id)!r}. Test ids are returned by rl_test_inference; tests are kept in {settings.tests_dir}.",
            "test_id",
            test_id,
        )
    return path


def read_test(settings: Settings, test_id: str, repair: bool = True) -> InferenceTestResult:
    """The latest state of a test. A test whose worker died unannounced reads as failed; with
    `repair` that is also recorded and its leftover model processes are ended, without it nothing
    is written or signalled (the MCP server's read tools: its watcher repairs, `repair_dead_tests`)."""
    folder = test_dir(settings, test_id)
    result = InferenceTestResult.load(folder / SUMMARY_FILE)
    if result.state != "running" or worker_alive(folder):
        return result
    # The worker may have written its final summary just before exiting: read once more.
    result = InferenceTestResult.load(folder / SUMMARY_FILE)
    if result.state != "running":
        return result
    tail = report.tail_text(folder / WORKER_LOG)
    error = "the test worker exited before this model finished"
    for m in result.models_tested if repair else ():
        if m.state == "running" and m.pid:
            # Its own session outlived the worker: end it, or it runs unwatched.
            stop_group(m.pid, m.pid, m.pid_create_time, 5.0, marker=marker_of_test(folder))
    for server_file in sorted(folder.glob(LOCAL_SERVER_GLOB)):  # the local model and run checkpoints
        try:
            server = WorkerRecord.model_validate_json(server_file.read_text(encoding="utf-8"))
            if repair:
                stop_group(server.pid, server.pgid, server.create_time or None, 5.0, marker=marker_of_test(folder))
        except (FileNotFoundError, ValueError):
            pass
    models = [
        m
        if m.state in FINAL_MODEL_STATES
        else m.model_copy(update={"state": "failed", "error": error, "log_tail": tail})
        for m in result.models_tested
    ]
    spec = TestSpec.load(folder / SPEC_FILE)
    failed = report.build_result(
        spec,
        models,
        folder,
        result.started_at,
        "failed",
        time.time(),
        note=f"The test worker exited unexpectedly; see {folder / WORKER_LOG}.",
    )
    if repair:
        failed.dump(folder / SUMMARY_FILE)
    return failed


def repair_dead_tests(settings: Settings) -> list[str]:
    """Record as failed every running test whose worker died, ending its leftover model
    processes; the ids repaired. For a server's watcher: reads only the running tests' summaries."""
    if not settings.tests_dir.is_dir():
        return []
    repaired = []
    for folder in settings.tests_dir.iterdir():
        try:
            if not (folder / SPEC_FILE).is_file() or InferenceTestResult.load(folder / SUMMARY_FILE).state != "running":
                continue
            if not worker_alive(folder) and read_test(settings, folder.name).state != "running":
                repaired.append(folder.name)
        except (NotFound, ValueError, OSError):
            continue
    return repaired


def list_tests(settings: Settings, limit: int = 50, repair: bool = True) -> list[dict[str, Any]]:
    """The newest tests first (ids start with their UTC start time), in brief."""
    if not settings.tests_dir.is_dir():
        return []
    ids = sorted((p.name for p in settings.tests_dir.iterdir() if (p / SPEC_FILE).is_file()), reverse=True)
    brief = []
    for test_id in ids[:limit]:
        try:
            result = read_test(settings, test_id, repair)
        except (NotFound, ValueError, OSError):
            continue
        brief.append(
            {
                "test_id": test_id,
                "state": result.state,
                "environment": result.environment,
                "models": [m.model for m in result.models_tested],
                "best_model": result.summary.best_model,
                "environment_working": result.summary.environment_working,
                "started_at": result.started_at,
                "resource": result.resource,
            }
        )
    return brief


def read_model(settings: Settings, test_id: str, model: str) -> ModelResult:
    """One model's result, by slug (as in the resource URI) or by model id."""
    result = read_test(settings, test_id)
    for entry in result.models_tested:
        if model in (entry.slug, entry.model):
            return entry
    names = ", ".join(m.slug for m in result.models_tested)
    raise NotFound(f"Test {test_id} has no model {model!r}; its models are: {names}.")


def model_file(settings: Settings, test_id: str, model: str, kind: FileKind) -> Path:
    """The JSONL, HTML report or log of one model (it may not exist yet)."""
    entry = read_model(settings, test_id, model)
    if not SLUG_RE.match(entry.slug):
        raise NotFound(f"Bad model folder {entry.slug!r}.")
    return test_dir(settings, test_id) / entry.slug / _FILES[kind]


def cancel_test(settings: Settings, test_id: str, timeout_s: float = 30.0) -> InferenceTestResult:
    """Stop a running test: its worker ends its models and the local server, then says so.

    A worker that does not finish within `timeout_s` has its group killed; the test then reads
    as failed (and its leftover model processes are ended by `read_test`).
    """
    folder = test_dir(settings, test_id)
    background.cancel_worker(folder, marker_of_test(folder), timeout_s)
    return read_test(settings, test_id)


# --- waiting --------------------------------------------------------------------------------
def progress_of(result: InferenceTestResult) -> tuple[int, int]:
    """(groups done, groups planned) over all models; a finished model counts in full."""
    steps = result.test_config.num_steps
    done = sum(steps if m.state in FINAL_MODEL_STATES else min(m.steps_done, steps) for m in result.models_tested)
    return done, steps * len(result.models_tested)


def _progress_message(result: InferenceTestResult) -> str:
    parts = []
    for m in result.models_tested:
        if m.state == "succeeded":
            parts.append(f"{m.model}: done, accuracy {m.accuracy}")
        elif m.state in FINAL_MODEL_STATES:
            parts.append(f"{m.model}: {m.state}")
        elif m.state == "running":
            parts.append(f"{m.model}: running ({m.steps_done}/{result.test_config.num_steps} steps)")
        else:
            parts.append(f"{m.model}: waiting")
    return "; ".join(parts)


async def wait_for_test(
    settings: Settings,
    test_id: str,
    timeout_s: float,
    on_progress: ProgressCallback | None = None,
    poll_s: float = 0.5,
    repair: bool = True,
) -> InferenceTestResult:
    """Wait until the test ends or `timeout_s` passes, reporting progress as it grows.

    A test still running at the deadline is returned as it is (state "running"), with a message
    saying where to read the result later: it keeps running without us.
    """
    reported = -1

    async def report(result: InferenceTestResult) -> None:
        nonlocal reported
        done, total = progress_of(result)
        if on_progress is not None and done > reported:
            reported = done
            await on_progress(float(done), float(total), _progress_message(result))

    result = await background.wait_for_job(
        lambda: read_test(settings, test_id, repair), lambda r: r.state == "running", timeout_s, report, poll_s
    )
    if result.state != "running":
        return result
    finished = result.summary.models_finished
    return result.model_copy(
        update={
            "message": (
                f"Still running after {timeout_s:.0f} s ({finished}/{len(result.models_tested)} models finished); "
                f"it keeps running in the background, independent of this server. "
                f"Read {test_uri(test_id)} for the result (each model has at most "
                f"{result.test_config.model_timeout_s:.0f} s)."
            )
        }
    )
