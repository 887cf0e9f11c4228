"""rl_generate_mcp_scenarios: scenarios for an MCP task file written by a named OpenRouter model
from the server's tool list (mcp_rl.environments.mcp_family.scenarios), estimated and asked
about as every paid work is (mcp_rl.costs.consent), into a JSONL file to read and edit."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Annotated, Any, Literal

import anyio
from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.types import ToolAnnotations
from pydantic import BaseModel, Field

from mcp_rl.costs.consent import gate, require_yes
from mcp_rl.costs.openrouter import fetch_prices
from mcp_rl.costs.scenarios import ScenarioEstimate, scenario_estimate
from mcp_rl.environments.mcp_family import scenarios as generation
from mcp_rl.environments.mcp_family.server import ToolServerError
from mcp_rl.environments.mcp_family.taskfile import McpTask, TaskFileError, load, named_variables
from mcp_rl.errors import UserError
from mcp_rl.server.budget import CallBudget, Progress, run_within
from mcp_rl.server.cost_consent import ASK_TIMEOUT_S, asker
from mcp_rl.server.errors import tool_errors
from mcp_rl.server.state import AppState

GENERATE = ToolAnnotations(
    title="Generate MCP scenarios with a hosted model",
    read_only_hint=False,
    destructive_hint=False,
    idempotent_hint=False,
    open_world_hint=True,
)
LISTING_MARGIN_S = 8.0  # of the call's budget, kept for the answer after listing the tools


class ScenariosAnswer(BaseModel):
    status: Literal["written", "running", "refused", "nothing_written"] = Field(
        description="written: the file is there to read and edit; running: call again with the same task_file "
        "and output to collect; refused: paid work above the threshold without max_cost_usd (nothing spent); "
        "nothing_written: the model gave no usable scenario (see problems)."
    )
    task_file: str
    path: str | None = Field(None, description="The JSONL file written (never one that existed).")
    written: int = 0
    model: str
    tools: list[str] = Field(default_factory=list, description="The offered tools the model was shown.")
    requests: int = 0
    cost_usd: float | None = Field(None, description="Spent: OpenRouter's reported usage.cost, summed.")
    cost_reported: bool = Field(True, description="False: some request's cost was computed from the listed price.")
    estimated_cost: dict[str, Any] | None = None
    stopped_by_cap: bool = False
    dropped: int = Field(0, description="Entries that were not scenarios, or repeated a prompt.")
    problems: list[str] = Field(default_factory=list)
    message: str
    next_calls: list[str] = Field(default_factory=list)


def _load(task_file: str) -> McpTask:
    path = Path(task_file).expanduser()
    if not path.is_absolute():
        raise UserError(f"task_file {task_file!r} is relative: give the absolute path of an *.mcp.yaml file.")
    try:
        return load(path)
    except TaskFileError as exc:
        raise UserError(f"{exc} Fix it (rl_validate_environment checks it), then call again.") from None


def _output(task: McpTask, output: str | None) -> Path:
    path = Path(output).expanduser() if output else task.path.parent / f"{task.name}.generated.jsonl"
    if not path.is_absolute():
        raise UserError(f"output {output!r} is relative: give an absolute path (or leave it out).")
    if path.exists():
        raise UserError(
            f"{path} exists: nothing was generated (a file is never replaced). Give another output path, or move it."
        )
    if not path.parent.is_dir():
        raise UserError(f"the folder of output {path} does not exist: nothing was generated.")
    return path


def register(mcp: MCPServer, state: AppState) -> None:
    settings = state.settings
    jobs = state.jobs

    @mcp.tool(title="Generate MCP scenarios with a hosted model", annotations=GENERATE)
    @tool_errors
    async def rl_generate_mcp_scenarios(
        ctx: Context,
        task_file: Annotated[str, Field(description="Absolute path of the MCP task file (*.mcp.yaml).")],
        model: Annotated[
            str, Field(min_length=1, description="The OpenRouter model that writes them, e.g. 'openai/gpt-4o-mini'.")
        ],
        count: Annotated[
            int, Field(ge=1, le=generation.MAX_SCENARIOS, description="How many scenarios to write.")
        ] = 50,
        output: Annotated[
            str | None,
            Field(description="Absolute path of the JSONL file to write (default: NAME.generated.jsonl beside it)."),
        ] = None,
        max_cost_usd: Annotated[
            float | None,
            Field(
                ge=0,
                le=10_000,
                allow_inf_nan=False,
                description="Stop before this estimated USD spend. None: no cap (above the confirmation threshold "
                "the person's yes is then needed).",
            ),
        ] = None,
    ) -> ScenariosAnswer:
        """Write training scenarios for an MCP task file with a hosted model (paid, OpenRouter).

        The task's server is started once to list the tools it offers (as training would: the
        allowed ones, never destructive or open-world ones unless named); the model is shown
        them (and a few of the task's own scenarios) and asked for questions those tools answer,
        each with its short answer when the tools determine one. Needs OPENROUTER_API_KEY.
        Cost: estimated before the first request (estimated_cost); above the confirmation
        threshold (default $5) without max_cost_usd nothing is sent: status 'refused' with the
        estimate and the call that accepts it (or the person is asked, when the client supports
        elicitation). Each request is metered (OpenRouter's usage.cost) and the work stops before
        it could pass the cap. The scenarios go to a NEW JSONL file (never replacing one), not
        into the task: read and edit it, then point the task's `scenarios:` at it (or append
        its lines to the task's file) and validate again. If it outlasts this call, the answer
        says 'running': call again with the same task_file and output to collect it.
        """
        if max_cost_usd is not None and max_cost_usd <= 0:
            raise UserError(f"max_cost_usd must be more than 0 USD (got {max_cost_usd:g}); nothing was generated.")
        budget = CallBudget(settings.tool_time_budget_s)
        progress = Progress(ctx, budget)
        task = await anyio.to_thread.run_sync(_load, task_file)
        key = f"scenarios:{task.path}:{output or ''}"
        running = jobs.get(key)
        if running is None:
            out_path = await anyio.to_thread.run_sync(_output, task, output)
            if settings.openrouter_api_key is None:
                raise UserError(
                    "OPENROUTER_API_KEY is not set: the scenarios are written by an OpenRouter model. Set it where "
                    "mcp-rl is started, or write the scenarios yourself (one {'prompt', 'answer'} a line)."
                )
            env = settings.user_code_env(named_variables(task.path))
            try:
                with anyio.fail_after(max(5.0, budget.remaining() - LISTING_MARGIN_S)):
                    tools = await generation.offered_tools(task, env)
            except TimeoutError:
                raise UserError(
                    f"The MCP server of {task.path.name} did not list its tools within this call (a first npx start "
                    "downloads the package): call again, or rl_validate_environment it first. Nothing was spent."
                ) from None
            except ToolServerError as exc:
                raise UserError(f"{exc}. Nothing was spent (rl_validate_environment shows the details).") from None
            if not tools:
                raise UserError(f"The task {task.name} offers no tool: name them in its `tools:`. Nothing was spent.")
            prices, problem = await anyio.to_thread.run_sync(fetch_prices, settings.openrouter_base_url)
            if not problem and model not in prices:
                raise UserError(
                    f"{model!r} is not a model OpenRouter lists with a price: give one of its ids, e.g. "
                    "'openai/gpt-4o-mini'. Nothing was spent."
                )
            asks = generation.requests_for(count)
            bounds = [generation.request_bounds(generation.prompt_for(task, tools, n), n) for n in asks]
            estimate = scenario_estimate(model, count, bounds, prices.get(model), problem)
            accept = (
                f"rl_generate_mcp_scenarios(task_file='{task.path}', model='{model}', count={count}, "
                "max_cost_usd={cap})"
            )
            try:
                decision = gate(
                    settings, estimate, max_cost_usd, f"Generating {count} scenarios with {model}", accept, "request"
                )
                await require_yes(decision, asker(ctx, min(ASK_TIMEOUT_S, max(1.0, budget.remaining() - 5))))
            except UserError as refusal:
                # An answer, not an error: nothing was spent, and the estimate is the news.
                return ScenariosAnswer(
                    status="refused",
                    task_file=str(task.path),
                    model=model,
                    tools=[t.name for t in tools],
                    estimated_cost=estimate.as_dict(),
                    message=str(refusal),
                )
            price = prices[model]
            cap = max_cost_usd if max_cost_usd is not None else estimate.high()
            cancel = threading.Event()

            def work() -> tuple[generation.Generated, ScenarioEstimate, list[str]]:
                assert settings.openrouter_api_key is not None
                try:
                    done = generation.generate(
                        task,
                        tools,
                        count,
                        out_path,
                        model=model,
                        base_url=settings.openrouter_base_url,
                        api_key=settings.openrouter_api_key.get_secret_value(),
                        pricing=generation.Pricing(*price),
                        cap_usd=cap,
                        cancelled=cancel.is_set,
                    )
                except (generation.GenerationError, FileExistsError) as exc:
                    raise UserError(f"No scenarios were written: {exc}.") from None
                return done, estimate, [t.name for t in tools]

            finished, outcome, job = await run_within(
                jobs, key, f"generating scenarios for {task.name}", work, budget, progress, cancel=cancel
            )
        else:
            finished, outcome, job = await run_within(jobs, key, running.what, lambda: None, budget, progress)
        if not finished:
            return ScenariosAnswer(
                status="running",
                task_file=str(task.path),
                model=model,
                message=f"Still generating ({job.running_for():.0f} s so far; it goes on in the background): call "
                f"rl_generate_mcp_scenarios(task_file='{task.path}', model='{model}'"
                + (f", output='{output}'" if output else "")
                + ") again to collect the file.",
            )
        done, estimate, names = outcome
        return _written(task, model, done, estimate, names)


def _written(
    task: McpTask, model: str, done: generation.Generated, estimate: ScenarioEstimate, tools: list[str]
) -> ScenariosAnswer:
    spent = f"${done.cost_usd:.4f} in {done.requests} request(s)"
    common: dict[str, Any] = {
        "task_file": str(task.path),
        "model": model,
        "tools": tools,
        "requests": done.requests,
        "cost_usd": round(done.cost_usd, 6),
        "cost_reported": done.cost_reported,
        "estimated_cost": estimate.as_dict(),
        "stopped_by_cap": done.stopped_by_cap,
        "dropped": done.dropped,
        "problems": done.problems[:10],
        "written": done.written,
    }
    if not done.written:
        return ScenariosAnswer(
            status="nothing_written",
            message=f"{model} gave no usable scenario ({spent}; {done.dropped} entries dropped): nothing was written."
            + (" The cap stopped it before the first request." if done.stopped_by_cap and not done.requests else ""),
            **common,
        )
    cap_note = " The cost cap stopped it early." if done.stopped_by_cap else ""
    return ScenariosAnswer(
        status="written",
        path=str(done.path),
        message=f"{done.written} scenarios written to {done.path} ({spent}; {done.dropped} dropped).{cap_note} "
        "Read and edit them before training: a wrong answer teaches the wrong thing.",
        next_calls=[
            f"edit {done.path}, then set `scenarios: {done.path.name}` in {task.path.name} (or append its lines to "
            f"{task.spec.scenarios})",
            f"rl_validate_environment(name='{task.path}')",
        ],
        **common,
    )
