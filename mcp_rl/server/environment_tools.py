"""Tools and resources for discovering, selecting and configuring environments."""

from __future__ import annotations

import json
import logging
import threading
from pathlib import Path
from typing import Annotated, Any, Literal

import anyio
from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import BaseModel, Field, TypeAdapter, WithJsonSchema

from mcp_rl.config import CurrentConfig, EditResult, config_revision
from mcp_rl.config.environment_service import EnvironmentService, SelectResult
from mcp_rl.config.training_cost import cost_preview
from mcp_rl.environments.child import end_orphans
from mcp_rl.environments.discovery import DuplicateName, EnvironmentInfo, ParseProblem
from mcp_rl.environments.gem_catalog import GemCatalog, GemGroup
from mcp_rl.environments.mcp_family.taskfile import TASK_FILE_SUFFIX as MCP_TASK_SUFFIX
from mcp_rl.environments.scaffold import McpServerGiven, NewEnvironment, new_mcp_task_file, new_task_file
from mcp_rl.environments.validate import ValidationReport, validate, validate_mcp_task
from mcp_rl.errors import DamagedState, McpRlError, UserError, clip_message
from mcp_rl.server.budget import CallBudget, Jobs, Progress, run_within, wait_job
from mcp_rl.server.errors import resource_errors, tool_errors
from mcp_rl.server.state import AppState
from mcp_rl.settings import Settings

# Every JSON type a config field or run option can take, so the schema gives `value` a type (strict
# function calling refuses an untyped property; Gemini declarations want one). A mapping or a nested
# list goes as JSON text. The SDK parses JSON text into an object before validation, so an object
# is accepted too (a field that holds JSON text, reasoning-gym's `params`, takes it back as text),
# but not published: Gemini and OpenAI refuse an object schema without properties.
Scalar = str | int | float | bool
EditValue = Annotated[
    Scalar | list[Scalar] | dict[str, Any] | None,
    WithJsonSchema(TypeAdapter(Scalar | list[Scalar] | None).json_schema()),
]

MCP_ENV_CLASS = "McpEnv"  # the bundled environment that plays MCP task files
log = logging.getLogger(__name__)

READ_ONLY = ToolAnnotations(read_only_hint=True, open_world_hint=False)
WRITES_NEW_FILE = ToolAnnotations(
    read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False
)
VALIDATES = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False)
IDEMPOTENT_EDIT = ToolAnnotations(
    read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False
)


class EnvironmentEntry(BaseModel):
    name: str = Field(description="Pass it to rl_select_environment (a qualified name when another has the same name).")
    own_name: str = Field("", description="The environment's own `name` attribute.")
    class_name: str
    file_path: str
    description: str
    kind: Literal["atropos", "task"] = Field(
        "atropos", description="task: a file using mcp-rl's task interface (mcp_rl.task); atropos: a BaseEnv class."
    )
    missing_modules: list[str] = Field(
        default_factory=list,
        description="Top-level modules it imports that are not installed (static check); selecting it says what to install.",
    )


class ValidateAnswer(BaseModel):
    """rl_validate_environment's answer."""

    status: Literal["passed", "failed", "running", "cancelled"] = Field(
        description="passed: no problem found; failed: see report.problems; running: call again to collect; "
        "cancelled: stopped by cancel=true (nothing of it is left running)."
    )
    environment: str
    message: str
    report: ValidationReport | None = None


class GemEnvironmentEntry(BaseModel):
    id: str = Field(description="Pass it to rl_select_environment.")
    group: str
    description: str
    needs: str | None = Field(None, description="What it downloads on first use (None: generated locally).")


class GemSummary(BaseModel):
    """GEM (gem-llm) environments, grouped by GEM's own id prefix."""

    installed: bool
    version: str | None = None
    total: int = 0
    groups: list[GemGroup] = []
    error: str | None = None


class EnvironmentList(BaseModel):
    environments: list[EnvironmentEntry]
    count: int
    problems: list[ParseProblem] = Field(description="Files that could not be parsed (skipped, not fatal).")
    duplicates: list[DuplicateName] = Field(
        description="Names defined more than once: the plain name means the first one found (`used_as`); each is also selectable by its qualified name."
    )
    searched: list[str]
    limits_hit: list[str] = Field(
        default_factory=list, description="Search limits reached (depth, file count): what was not searched."
    )
    tips: list[str]
    gem: GemSummary | None = Field(None, description="GEM environments by group (ids listed with a filter).")
    gem_environments: list[GemEnvironmentEntry] = Field(
        default_factory=list, description="GEM ids matching `filter` (only when a filter is given), one page."
    )
    gem_matches: int = Field(0, description="GEM ids matching `filter` in all pages.")
    next_offset: int | None = Field(None, description="offset of the next page of gem_environments, if any.")


REVISION_DOC = (
    "The config's revision after this answer: pass it as rl_start_training(expected_revision=...) so the "
    "run refuses to start if another client changed the config in between."
)


class SelectAnswer(SelectResult):
    """rl_select_environment's answer: selected, or still loading in the background."""

    status: Literal["selected", "loading"] = Field(
        default="selected", description="loading: the environment is still being imported; nothing is selected yet."
    )
    class_name: str | None = None  # type: ignore[assignment]
    file_path: str | None = None  # type: ignore[assignment]
    config_class: str | None = None  # type: ignore[assignment]
    config_source: str | None = None  # type: ignore[assignment]
    configurable_fields: int | None = None  # type: ignore[assignment]
    loading_for_s: float | None = Field(default=None, description="While loading: seconds the import has taken so far.")
    revision: str | None = Field(default=None, description=REVISION_DOC)


class CurrentConfigAnswer(CurrentConfig):
    revision: str = Field(description=REVISION_DOC)
    estimated_cost: dict[str, object] | None = Field(
        None,
        description="What a run of this config is estimated to cost (tokens and USD per step and for the run, low / "
        "expected / high, with its drivers); $0 on the local backend; 'unknown' with the reason when it cannot be "
        "priced. A paid run above the confirmation threshold needs max_cost_usd set (rl_edit_config).",
    )


class EditAnswer(EditResult):
    revision: str = Field(description=REVISION_DOC)
    applied: bool = Field(True, description="False: the edit was refused (see `refused`); nothing changed.")
    refused: str | None = Field(None, description="Why the edit was refused, with the valid names or range.")
    kind: Literal["environment", "run_option"] | None = None  # type: ignore[assignment]


async def selected_spec_ready(
    jobs: Jobs, service: EnvironmentService, budget: CallBudget, progress: Progress, tool: str
) -> None:
    """Make sure the selected environment's config is loaded (it is re-imported when its file
    changed), within the call's budget; otherwise refuse, changing nothing, and say when to retry."""
    session = await anyio.to_thread.run_sync(service.store.read)
    key = f"spec:{session.environment.file_path if session.environment else None}"
    done, _, job = await run_within(
        jobs, key, "reading the selected environment's config", service.selected, budget, progress
    )
    if not done:
        raise ToolError(
            f"The selected environment's config is still being read (its file changed; importing it has taken "
            f"{job.running_for():.0f} s so far) and it goes on in the background. Nothing was done: call {tool} "
            "again in a moment."
        )


def _validated(settings: Settings, env: EnvironmentInfo, sample: bool, cancel: threading.Event) -> ValidationReport:
    """validate(), with a reason when the child's report cannot be read (never a bare error)."""
    try:
        return validate(settings, env, sample=sample, cancel=cancel)
    except McpRlError:
        raise
    except (ValueError, TypeError) as exc:  # json or pydantic: what the child printed last is not a report
        raise UserError(
            f"Validating {env.name} ended without a readable report: the last line its child process printed is "
            f"not the report ({type(exc).__name__}: {clip_message(str(exc), 200)}). The task may print to standard "
            "output (print() at import, in a method or at exit): print to stderr or log instead, then call "
            f"rl_validate_environment({env.name!r}) again."
        ) from None


def _mcp_task_file(service: EnvironmentService, name: str) -> tuple[Path | None, EnvironmentInfo | None]:
    """What `name` asks to validate: an MCP task file (given by its path, or the `task_file` set on
    the selected MCP environment) or an environment."""
    if name.endswith(MCP_TASK_SUFFIX):
        return Path(name).expanduser().resolve(), None
    env = service.get(name)
    if env.class_name != MCP_ENV_CLASS:
        return None, env
    try:
        session, _ = service.selected()
    except UserError:
        session = None
    chosen = session.edits.get("task_file") if session and session.environment else None
    if not chosen or session is None or session.environment is None or session.environment.file_path != env.file_path:
        raise UserError(
            f"{name} trains on an MCP task file: pass its path, rl_validate_environment('path/to/task.mcp.yaml'), "
            f"or select {name} and set it first (rl_edit_config field task_file)."
        )
    path = Path(str(chosen)).expanduser()
    return (path if path.is_absolute() else env.project_root / path).resolve(), env


def _gem_summary(gem: GemCatalog) -> GemSummary:
    return GemSummary(
        installed=gem.installed, version=gem.version, total=len(gem.entries), groups=gem.groups(), error=gem.error
    )


def _matches(text: str | None, *fields: str) -> bool:
    return text is None or text.strip().lower() in "\n".join(fields).lower()


async def _cancel_validation(jobs: Jobs, keys: list[str], name: str, budget: CallBudget) -> ValidateAnswer:
    """Stop the validations of `name` still running (their child and all it started end)."""
    running = [job for key in keys if (job := jobs.get(key)) is not None and not job.done.is_set()]
    for job in running:
        job.cancel.set()
    for job in running:
        if await wait_job(job, budget):
            jobs.forget(job)
    if not running:
        return ValidateAnswer(
            status="cancelled", environment=name, message=f"No validation of {name} was running: nothing to cancel."
        )
    left = [job for job in running if not job.done.is_set()]
    return ValidateAnswer(
        status="running" if left else "cancelled",
        environment=name,
        message=(
            f"Cancelling the validation of {name}: it is still ending; call rl_validate_environment('{name}', "
            "cancel=true) again to see it ended."
            if left
            else f"The validation of {name} was cancelled: its process and everything it started have ended."
        ),
    )


def register(mcp: MCPServer, state: AppState) -> None:
    service = state.environments
    # Stops the introspection worker (a child process of ours) when the server stops.
    state.background_tasks.append(service.close_on_exit)

    jobs = state.jobs
    budget_s = state.settings.tool_time_budget_s

    async def end_orphaned_children() -> None:
        """A validation (or other user-code child) whose server was killed is ended by its marker.
        On a daemon thread: the start-up does not wait for it."""

        def work() -> None:
            try:
                for what in end_orphans(state.settings):
                    log.info("ended %s, left by a server that died", what)
            except Exception:
                log.exception("ending orphaned children failed")

        threading.Thread(target=work, name="end-orphans", daemon=True).start()

    state.startup_hooks.append(end_orphaned_children)

    @mcp.tool(title="List training environments", annotations=READ_ONLY)
    @tool_errors
    async def rl_list_environments(
        ctx: Context,
        filter: Annotated[
            str | None,
            Field(
                description="Case-insensitive text to look for in names, GEM ids, groups and descriptions "
                "(e.g. 'game', 'wordle', 'rg:'); 'gem' lists every GEM environment. Without it, GEM "
                "environments are only summarised by group."
            ),
        ] = None,
        offset: Annotated[int, Field(ge=0, description="First GEM match to return (paging).")] = 0,
        limit: Annotated[int, Field(ge=1, le=200, description="GEM matches per page.")] = 50,
    ) -> EnvironmentList:
        """List the RL environments available for training.

        Scans the bundled environments and every folder in MCP_RL_ENV_PATHS for Atropos BaseEnv
        classes and task files (subclasses of mcp_rl.task.Task, kind "task"; source only, nothing
        is imported). Files that fail to parse are listed under
        `problems`; duplicate names under `duplicates`. GEM environments (gem-llm: games such as
        game:GuessTheNumber-v0-easy, Wordle, Sudoku; math/code/QA datasets) and reasoning-gym's
        datasets (`rg:<dataset>`, with their parameters; slow ones said so) are summarised under
        `gem`; pass `filter` to list matching ids (paged), or read rl://environments/gem for all.
        A reasoning-gym mixture is selected as `rg:<a>=<weight>,<b>=<weight>`; every rg: selection
        has held-out items from seeds training never reaches. Next: rl_select_environment(name or id).
        """
        budget = CallBudget(budget_s)
        progress = Progress(ctx, budget)
        # Scanning large MCP_RL_ENV_PATHS folders reads every Python file once (then cached).
        scanned, catalog, scan = await run_within(
            jobs, "scan", "scanning the environment folders", service.catalog, budget, progress
        )
        if not scanned:
            raise ToolError(
                f"Still scanning the environment folders ({scan.running_for():.0f} s so far; it goes on in the "
                "background): call rl_list_environments again in a moment."
            )
        # The first read of the GEM catalog imports gem in a child process (seconds, or more).
        done, gem, job = await run_within(
            jobs, "gem-catalog", "listing the GEM environments", service.gem, budget, progress
        )
        if not done:
            gem = GemCatalog(
                installed=True,
                error=f"The GEM catalog is still loading ({job.running_for():.0f} s so far; it goes on in the "
                "background): call rl_list_environments again in a moment for the GEM ids.",
            )
        gem_page: list[GemEnvironmentEntry] = []
        matches = 0
        next_offset = None
        if filter is not None:
            found = gem.search(filter)
            matches = len(found)
            gem_page = [
                GemEnvironmentEntry(id=e.id, group=e.group, description=e.description, needs=e.needs)
                for e in found[offset : offset + limit]
            ]
            next_offset = offset + limit if offset + limit < matches else None
        environments = [
            e
            for e in catalog.environments
            if filter is None
            or filter.strip().lower() in ("gem", "*")
            or _matches(filter, e.select_name, e.description)
        ]
        missing = await anyio.to_thread.run_sync(service.missing_modules, catalog)
        return EnvironmentList(
            environments=[
                EnvironmentEntry(
                    name=e.select_name,
                    own_name=e.name,
                    class_name=e.class_name,
                    file_path=str(e.file_path),
                    description=e.description,
                    kind=e.kind,
                    missing_modules=missing.get(e.select_name, []),
                )
                for e in environments
            ],
            count=len(environments),
            problems=catalog.problems,
            duplicates=catalog.duplicates,
            searched=[str(p) for p in catalog.searched],
            limits_hit=catalog.limits_hit,
            tips=[
                "Select one with rl_select_environment(name); its config fields are then loaded.",
                "Smoke-test it with rl_test_inference before training.",
                "Add folders of environments with the MCP_RL_ENV_PATHS environment variable.",
                "A task of your own: rl_new_environment(name) writes a working task file to edit "
                "(mcp_rl.task: items, chat, score); then rl_validate_environment(name).",
                (
                    "GEM environments: rl_list_environments(filter='game') lists the game ids; select one by id, "
                    "e.g. rl_select_environment('game:GuessTheNumber-v0-easy')."
                ),
            ],
            gem=_gem_summary(gem),
            gem_environments=gem_page,
            gem_matches=matches,
            next_offset=next_offset,
        )

    @mcp.tool(title="Write a new task file", annotations=WRITES_NEW_FILE)
    @tool_errors
    async def rl_new_environment(
        name: Annotated[
            str,
            Field(description="The task's name, a lowercase identifier (e.g. 'larger_number'); the file is NAME.py."),
        ],
        folder: Annotated[
            str | None,
            Field(
                description="Absolute folder to write it into, inside an MCP_RL_ENV_PATHS folder or $MCP_RL_HOME/envs "
                "(default: the first MCP_RL_ENV_PATHS folder, else $MCP_RL_HOME/envs, which is always searched)."
            ),
        ] = None,
        mcp_command: Annotated[
            list[str] | None,
            Field(
                description="Teach a model to use an MCP server: its stdio command line, e.g. "
                "['npx', '-y', '@modelcontextprotocol/server-memory']; writes NAME.mcp.yaml and NAME.scenarios.jsonl."
            ),
        ] = None,
        mcp_url: Annotated[
            str | None, Field(description="Or a Streamable HTTP MCP server's endpoint (instead of mcp_command).")
        ] = None,
        mcp_env_vars: Annotated[
            list[str] | None,
            Field(description="Names of the variables the stdio server may receive (it gets no others)."),
        ] = None,
        mcp_auth_env_var: Annotated[
            str | None, Field(description="The variable whose value is the HTTP server's bearer token.")
        ] = None,
    ) -> NewEnvironment:
        """Start a new task of your own: write a complete, working task file to edit.

        With mcp_command or mcp_url: an MCP task file instead (NAME.mcp.yaml: the server, the
        scenarios file, the reward, the allowed tools, the limits) and NAME.scenarios.jsonl with
        example lines to replace; the bundled 'mcp' environment trains it (set its task_file).

        Use this when the user's task is not among rl_list_environments' entries. The file uses
        mcp-rl's task interface (mcp_rl.task): seeded training and held-out items, the chat for an
        item, score(completion, item) in a declared range. It trains as written (a small adding
        task); edit train_items() and held_out_items() (each item built by make()), messages() and
        score() into the user's task. The name must be free: one an environment already has, or a
        module it would shadow (standard library, mcp_rl, an installed package), is refused with a
        free name suggested. mcp-rl does the rest:
        sampling, masks, groups, resume, and the held-out evaluation at step 0 and at the end
        (base -> trained with a paired test). Never overwrites: an existing file is refused.
        Answers with the path, what to edit, and the next calls (validate, select, smoke-test, train).
        """
        if mcp_command or mcp_url or mcp_env_vars or mcp_auth_env_var:
            given = McpServerGiven(
                command=mcp_command, url=mcp_url, env_vars=mcp_env_vars or [], auth_env_var=mcp_auth_env_var
            )
            return await anyio.to_thread.run_sync(new_mcp_task_file, state.settings, name, given, folder)
        return await anyio.to_thread.run_sync(new_task_file, state.settings, name, folder)

    @mcp.tool(title="Validate a task or environment", annotations=VALIDATES)
    @tool_errors
    async def rl_validate_environment(
        ctx: Context,
        name: Annotated[
            str,
            Field(description="Environment or task name from rl_list_environments, or an MCP task file's path."),
        ],
        sample_base_model: Annotated[
            bool,
            Field(description="Also score a few answers the local base model samples (free; adds ~10-30 s)."),
        ] = True,
        cancel: Annotated[
            bool,
            Field(description="Stop a validation of this name still running in the background (and all it started)."),
        ] = False,
    ) -> ValidateAnswer:
        """Check a task (or environment) file before any run, in a child process; free (no paid call).

        An MCP task file (`name` is its path, `*.mcp.yaml`, or the `mcp` environment with task_file
        set): it loads (a bad field is named), its server starts with exactly the variables the
        file names and lists its tools, the allowed tools exist and render for the base model (chat
        template or fallback), each scenario's reward runs on its reference answer (problems name
        the scenario's line); tools withheld for destructiveHint/openWorldHint are listed (report.mcp).
        Degenerate final answers (empty, the prompt echoed, the most common answer, every answer
        joined in one reply, a digit string) are scored with the task's own reward
        (report.degenerate_replies); a warning names one that earns too much (e.g. a `contains`
        reward paying the reply that lists every answer). read_back and judge rewards cannot be
        probed offline (report.mcp.degenerate_probes says so).

        For a task (mcp_rl.task): builds its training and held-out items, checks that no held-out
        prompt is a training prompt, scores the reference answers (they must get the top of
        score_range) and a few wrong ones, and scores a handful of answers the local base model
        samples, with timings. Anything that raises is reported with its exception, file and
        line; so are non-finite or out-of-range scores and a file that does not import. An Atropos
        environment is run for real against the local base model: setup(), a few get_next_item(),
        one group of rollouts and its scores (identical rewards: a no-signal warning), the time per
        group, and evaluate() on a few items with the score mcp-rl would read from it (report.atropos).
        The result is recorded: a start
        of a task that never passed validation says so in its notes. If the check outlasts this
        call, the answer says status 'running': call again with the same name to collect it, or
        with cancel=true to stop it. The task's code runs with no key of the server's unless its
        `env_vars` names it, and keys are removed from the report.
        """
        budget = CallBudget(budget_s)
        progress = Progress(ctx, budget)
        task_file, env = await anyio.to_thread.run_sync(_mcp_task_file, service, name)
        if task_file is not None:
            keys = {flag: f"validate:{task_file}:mcp:{flag}" for flag in (True, False)}
        else:
            assert env is not None
            keys = {flag: f"validate:{env.file_path}:{env.class_name}:{flag}" for flag in (True, False)}
        if cancel:
            return await _cancel_validation(jobs, [keys[True], keys[False]], name, budget)
        cancel_event = threading.Event()

        def check() -> ValidationReport:
            if task_file is not None:
                return validate_mcp_task(state.settings, task_file, sample_base_model, cancel=cancel_event)
            assert env is not None
            return _validated(state.settings, env, sample_base_model, cancel_event)

        done, report, job = await run_within(
            jobs, keys[sample_base_model], f"validating {name}", check, budget, progress, cancel=cancel_event
        )
        if not done:
            return ValidateAnswer(
                status="running",
                environment=name,
                message=f"Still validating {name} ({job.running_for():.0f} s so far; it goes on in the background): "
                f"call rl_validate_environment('{name}') again to collect the report (cancel=true stops it).",
            )
        return ValidateAnswer(
            status="passed" if report.ok else "failed",
            environment=name,
            message=(
                f"{name}: no problem found"
                if report.ok
                else f"{name}: {len(report.problems)} problem(s): " + "; ".join(p.message for p in report.problems[:3])
            )
            + (f" ({len(report.warnings)} warning(s))." if report.warnings else "."),
            report=report,
        )

    @mcp.tool(title="Select an environment", annotations=IDEMPOTENT_EDIT)
    @tool_errors
    async def rl_select_environment(
        ctx: Context,
        name: Annotated[str, Field(description="Environment name from rl_list_environments, e.g. 'arithmetic'.")],
    ) -> SelectAnswer:
        """Select the environment to configure, test and train.

        Loads the environment's config fields (imports it in a separate process; the first time can
        take seconds to minutes, later selects are instant until the file changes). Selecting resets
        environment field edits to the environment's defaults; run options are kept.
        Answers within the server's time budget: if the import is still going then, the answer
        has status "loading" and nothing is selected yet; the import goes on in the background and
        calling rl_select_environment(name) again finishes the selection.
        """
        budget = CallBudget(budget_s)
        progress = Progress(ctx, budget)

        def load() -> None:  # the slow part: find it (GEM ids read GEM's catalog) and import it
            service.spec(service.get(name))

        done, _, job = await run_within(
            jobs, f"select:{name}", f"importing {name} to read its config", load, budget, progress
        )
        if not done:
            return SelectAnswer(
                status="loading",
                message=(
                    f"Still importing {name!r} to read its config ({job.running_for():.0f} s so far; the limit is "
                    f"{state.settings.introspect_timeout_s:.0f} s). It goes on in the background. Nothing is selected "
                    f"yet: call rl_select_environment({name!r}) again to finish (instant once loaded)."
                ),
                environment=name,
                loading_for_s=round(job.running_for(), 1),
                next_step=f"rl_select_environment({name!r})",
            )
        result = await anyio.to_thread.run_sync(service.select, name)
        session = await anyio.to_thread.run_sync(service.store.read)
        await progress.report(f"selected {name}")
        return SelectAnswer(**result.model_dump(), revision=config_revision(session))

    @mcp.tool(title="Show the current configuration", annotations=READ_ONLY)
    @tool_errors
    async def rl_get_current_config(ctx: Context) -> CurrentConfigAnswer:
        """Show the selected environment's configuration.

        configurable_fields (type, default, description, current_value) can be changed with
        rl_edit_config; locked_fields are set by the infrastructure; run_options (backend, base
        model, total_steps, batch_size, LoRA rank, learning rate, wandb_project, ...; launcher
        local/slurm/ray with a cluster job's gpus, partition, account, time_limit_minutes,
        ray_address) are editable with rl_edit_config too. `revision` identifies this config (see
        rl_start_training).
        """
        budget = CallBudget(budget_s)
        await selected_spec_ready(jobs, service, budget, Progress(ctx, budget), "rl_get_current_config")
        current = await anyio.to_thread.run_sync(service.current)
        session = await anyio.to_thread.run_sync(service.store.read)
        cost = await anyio.to_thread.run_sync(lambda: cost_preview(state.settings, service))
        return CurrentConfigAnswer(**current.model_dump(), revision=config_revision(session), estimated_cost=cost)

    @mcp.tool(title="Change a config field or run option", annotations=IDEMPOTENT_EDIT)
    @tool_errors
    async def rl_edit_config(
        ctx: Context,
        field: Annotated[str, Field(description="A configurable field or run option name from rl_get_current_config.")],
        value: Annotated[
            EditValue,
            Field(
                description="New value, of the field's type: a number, boolean, string, list of scalars, or null "
                "(numbers and booleans sent as text are read as JSON; a nested list or a mapping goes as JSON text, "
                "e.g. reasoning-gym's params)."
            ),
        ],
    ) -> EditAnswer:
        """Change one field of the selected environment's config, or one run option.

        The value is checked against the environment's own config class (type and range); locked
        fields, unknown fields and invalid values are refused with the reason (applied=false,
        `refused` says why and what is valid), and nothing changes.
        The answer carries the config's new `revision`: pass it to
        rl_start_training(expected_revision=...) to train exactly this config.
        """
        budget = CallBudget(budget_s)
        await selected_spec_ready(jobs, service, budget, Progress(ctx, budget), "rl_edit_config")
        try:
            result = await anyio.to_thread.run_sync(service.edit, field, value)
        except DamagedState:
            raise  # a real failure of the server's state, not a refused edit
        except UserError as exc:
            # An unknown field, a locked one or a value out of range: an answer the agent acts on,
            # not an error (hosts such as Hermes switch a server off after 3 errors in a row;
            # docs/design-notes.md, "Refusals are answers").
            reason = clip_message(str(exc))
            session = await anyio.to_thread.run_sync(service.store.read)
            return EditAnswer(
                message="Refused, nothing changed: see `refused` for why and what is valid.",
                field=field if len(field) <= 200 else clip_message(field, 200),  # never echo a huge input back
                value=None,
                applied=False,
                refused=reason,
                revision=config_revision(session),
            )
        # The revision of the config this edit wrote (taken under the lock), not a later read's.
        return EditAnswer(**result.model_dump(exclude={"revision"}), revision=result.revision or "")

    @mcp.resource(
        "rl://environments",
        name="environments",
        title="Environments",
        mime_type="application/json",
        description="Every environment mcp-rl found (bundled ones and MCP_RL_ENV_PATHS), with the files it could not parse.",
    )
    def environments_resource() -> str:
        return service.catalog().model_dump_json(indent=2)

    @mcp.resource(
        "rl://environments/gem",
        name="gem_environments",
        title="GEM environments",
        mime_type="application/json",
        description="Every GEM environment id (gem-llm) with its group, description and kwargs.",
    )
    def gem_environments_resource() -> str:
        gem = service.gem()
        data = _gem_summary(gem).model_dump(mode="json")
        data["select_with"] = "rl_select_environment('<id>'): the bundled 'gem' environment with env_id preset."
        data["environments"] = [e.model_dump(mode="json") for e in gem.entries]
        return json.dumps(data, indent=2)

    @mcp.resource(
        # {+name}: a duplicate's qualified name (folder/name) keeps its "/".
        "rl://environments/{+name}",
        name="environment",
        title="Environment details",
        mime_type="application/json",
        description="One environment (a name or GEM id from rl_list_environments): its metadata and Python source.",
    )
    @resource_errors
    def environment_resource(name: str) -> str:
        env = service.get(name)
        data = env.model_dump(mode="json")
        data["source"] = Path(env.file_path).read_text(encoding="utf-8", errors="replace")
        return json.dumps(data, indent=2)

    @mcp.resource(
        "rl://config/current",
        name="current_config",
        title="Current configuration",
        mime_type="application/json",
        description="The selected environment's config fields and run options, with their current values.",
    )
    def current_config_resource() -> str:
        session = service.store.read()
        if session.environment is None:
            return json.dumps({"environment": None, "message": "No environment selected; call rl_select_environment."})
        return service.current().model_dump_json(indent=2)

    @mcp.resource(
        "rl://config/locked",
        name="locked_config",
        title="Fields set by mcp-rl",
        mime_type="application/json",
        description="Config fields mcp-rl sets itself for the current backend (rl_edit_config refuses them).",
    )
    def locked_config_resource() -> str:
        return json.dumps(service.locked(), indent=2)
