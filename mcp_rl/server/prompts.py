"""Prompts: whole workflows a person can start from a client's prompt menu or slash command.

Each prompt is one user message that walks the agent through the tools as they are, in order,
with the points where it must stop and ask the person. Arguments are optional where the agent can
find the value itself; completions for them live in `mcp_rl.server.completions`. A bad argument
(an unknown run id) is refused with the reason, as tools do.
"""

from __future__ import annotations

from typing import Annotated

from mcp import MCPError
from mcp.server import MCPServer
from mcp.types import INVALID_PARAMS
from pydantic import Field

from mcp_rl.server.state import AppState
from mcp_rl.supervisor.registry import Registry

MAX_COMPARED_RUNS = 6

Environment = Annotated[
    str | None,
    Field(
        description="Environment name or GEM id (e.g. arithmetic, game:GuessTheNumber-v0-easy); empty: choose one together."
    ),
]
RunIdArg = Annotated[str, Field(description="The run id (from rl_list_runs or rl_start_training).")]


def _backend_line(state: AppState) -> str:
    if state.settings.tinker_api_key is not None:
        return "This server trains on Tinker (TINKER_API_KEY is set): runs cost Tinker credits."
    return (
        "This server has no TINKER_API_KEY, so it trains on the local CPU backend with a small model: "
        "free, but slow (minutes per step for larger models)."
    )


def _smoke_test_line(state: AppState) -> str:
    if state.settings.openrouter_api_key is not None:
        return (
            "rl_test_inference with no models tests three OpenRouter models of different sizes (costs "
            "OpenRouter credits); models=['local'] tests the embedded local model for free."
        )
    return "Without OPENROUTER_API_KEY, rl_test_inference tests the embedded local model (free, on this machine)."


CAUSE_CHARS = 300  # a cause is quoted in a prompt only as a pointer; the tools give all of it


def _recorded_runs(state: AppState, run_ids: list[str]) -> list[str]:
    """One line per run as the registry has it (cheap: no reconcile, no files read).

    Raises:
        MCPError: an id the registry does not know.
    """
    records = {}
    if state.settings.state_db.exists():
        records = {r.run_id: r for r in Registry(state.settings.state_db).list_runs()}
    unknown = [r for r in run_ids if r not in records]
    if unknown:
        raise MCPError(
            INVALID_PARAMS,
            f"Unknown run id(s): {', '.join(unknown)}. Call rl_list_runs (or read rl://runs) for the ids on this server.",
        )
    lines = []
    for run_id in run_ids:
        run = records[run_id]
        cause = " ".join((run.cause or "").split())
        cause = f"; cause: {cause[:CAUSE_CHARS]}{'...' if len(cause) > CAUSE_CHARS else ''}" if cause else ""
        lines.append(f"- {run_id}: {run.state.value}, environment {run.environment}, backend {run.backend}{cause}")
    return lines


def _split(values: str | None) -> list[str]:
    return [v.strip() for v in (values or "").replace("\n", ",").split(",") if v.strip()]


def train_environment_text(state: AppState, environment: str | None, goal: str | None) -> str:
    pick = (
        f"1. Call rl_select_environment('{environment}'). If it is refused, show the person the reason and the "
        "closest names, and ask which one they meant. If it answers status 'loading', call it again as it says."
        if environment
        else "1. Call rl_list_environments (filter='game' or another word lists GEM ids too). Show the person a short "
        "list of suitable environments with one line each, ask which one to train, then call rl_select_environment(name) "
        "(again, if it answers status 'loading')."
    )
    own = (
        "If the person's task is their own (none listed fits), call rl_new_environment(name): it writes a working "
        "task file (mcp_rl.task: items with a held-out set, the chat, score). Edit it into their task, call "
        "rl_validate_environment(name) until it reports no problem and no degenerate-reply warning (its "
        "report.degenerate_replies: what an empty reply, a digit string, the prompt echoed and one constant answer "
        "score; a scorer paying them is learned instead of the task), then rl_select_environment(name)."
    )
    aim = f"The person's goal: {goal}\n\n" if goal else ""
    return f"""Train a language model with reinforcement learning on an environment, using the mcp-rl tools.

{aim}{_backend_line(state)}

Follow these steps in order and do not skip the confirmation.
{pick} {own}
2. Call rl_get_current_config. Summarise for the person: the environment's configurable fields that matter \
(with current values; group_size is one of them), and the run options (backend, base_model, total_steps, \
batch_size, lora_rank, learning_rate). Propose changes that fit the goal and make them with rl_edit_config(field, value), one field per \
call. A refused edit says why; fix the value, never force it. Note the config revision of the last answer.
3. Smoke-test before training: call rl_test_inference (num_steps=2 is enough for a first look). \
{_smoke_test_line(state)} If the answer's state is running, collect it with rl_get_test_result(test_id, \
wait_s=40) until it has ended (rl_cancel_test(test_id) stops it). Report per model: accuracy, mean score, errors. If environment_working is false or every score is 0, stop here and show the errors: training would \
waste time.
4. Ask the person to confirm, showing: environment, base model, backend, total_steps, batch size, and that \
training runs for a long time in the background. Start only after a clear yes.
5. Call rl_start_training(idempotency_key=<a new UUID>, expected_revision=<the revision you reviewed>); \
after a timeout, retry with the same key (it returns the same run, never a second one). Give the person the \
run_id and the W&B link if any.
6. Watch it: rl_wait_for_run(run_id) returns when the next step is logged (or after the server's time budget) \
with the latest metrics; rl_check_status(run_id) gives the full status (rate-limited while the run is going: \
do not poll in a tight loop); rl_read_log(run_id) follows the trainer's log. Report step, reward mean and loss, and pass on any learning_signal.warning and \
learning_signal.monitors entry (answers growing longer, groups collapsing to one answer, a reward rising without \
the held-out score) with its advice. If the state becomes failed, follow the diagnose_run \
prompt's steps for this run_id.
7. When the state is completed (or the person wants to stop: rl_stop_training(run_id)), call \
rl_get_results(run_id): lead with its held_out verdict, not the training reward: quote held_out.sentence \
(base -> trained on held-out items, the test, n, the interval), the best constant answer's score \
(held_out.constant_baseline: when held_out.learned is false the run is NOT shown to have learned the task, \
whatever p says; say so; when it is null, say why: no baseline, or only a lower bound of one), the shape of \
the answers (held_out.answers: distinct share, most common answer, full vs partial credit, share stopped at \
max_tokens, share repeating the prompt; per group in held_out.groups) and every held_out.warnings entry with \
its advice (held_out.thresholds says when each fires). Then the first, final and best \
training reward, where the weights are (a tinker:// URL or a local folder) and the W&B run, and say in one \
sentence whether the run is worth keeping."""


def diagnose_run_text(run_id: str, recorded: list[str]) -> str:
    return f"""Diagnose training run {run_id} with the mcp-rl tools and tell the person what went wrong \
(or that nothing did) and how to fix it.

As recorded when this prompt was made (rl_check_status refreshes it):
{chr(10).join(recorded)}

1. Call rl_check_status('{run_id}'): the state, each process's status, the cause if it failed, the latest \
metrics (step, reward mean, loss) and the log resources. If the answer is rate_limited, read \
rl://runs/{run_id} instead (never rate-limited).
2. Read the logs, the failed process's log before the others: rl_read_log('{run_id}', process=...) for \
trainer, env, api and supervisor (pass the answer's next_cursor to read on), or the resources \
rl://runs/{run_id}/logs/trainer (and /env, /api, /supervisor; ?tail=400 for more). Look for the first error or \
traceback, not the last line.
3. Read the metrics: rl_get_results('{run_id}', include_plot=false) gives the reward, loss and accuracy history; \
rl://runs/{run_id}/metrics has every step. Read the config the run used: rl://runs/{run_id}/config.
4. Name the likely cause with the evidence (quote the log line or the metric), then the fix. Common ones:
   - a process exited at start (import error, missing package, bad config value): fix the environment or \
config, smoke-test with rl_test_inference, start again;
   - no scored data reaches the trainer (reward stays empty, env log shows timeouts or parse failures): the \
environment or model output format is the problem; smoke-test and read the sample rollouts;
   - reward flat at 0: the task is too hard for the model or the answer format is never parsed: try an easier \
setting, a larger model, or check the scoring with rl_test_inference;
   - reward flat at the maximum from the start: too easy, nothing to learn: make it harder;
   - loss NaN or exploding, reward collapsing: lower learning_rate (e.g. by 4x) and restart;
   - authentication or quota errors (Tinker, W&B, OpenRouter): a key is missing or wrong in the server's environment;
   - port in use or the API never became ready: another run or program holds the port; stop leftovers \
(rl_list_runs, rl_stop_training) and start again;
   - stopped: someone called rl_stop_training; completed: nothing is wrong, report the results.
5. Say what to change (rl_edit_config(field, value) for config fields) and whether to start a new run. Do not \
start one without the person's yes."""


def compare_runs_text(run_ids: list[str], recorded: list[str]) -> str:
    calls = ", ".join(f"rl_get_results('{r}', include_plot=false)" for r in run_ids)
    configs = ", ".join(f"rl://runs/{r}/config" for r in run_ids)
    return f"""Compare the training runs {", ".join(run_ids)} with the mcp-rl tools and tell the person which \
is best and why.

As recorded when this prompt was made:
{chr(10).join(recorded)}

1. Get each run's results: {calls}. Note each run's state; a run still going is compared as it is now, say so.
2. Read the configs the runs used ({configs}) and list only the settings that differ (environment, base model, \
backend, total_steps, batch_size, group_size, learning_rate, lora_rank, environment fields).
3. Show one table, a column per run: environment, base model, state, steps done, first / final / best reward \
mean (with the step of the best), final accuracy if reported, final loss, running time, weights.
4. Conclude: which run learned most (the gain from first to final reward, not the final value alone, when \
environments or models differ), whether the difference is larger than the step-to-step noise in the histories, \
which setting most likely made the difference, and what to try next."""


def smoke_test_text(state: AppState, environment: str | None, models: list[str], num_steps: int | None) -> str:
    select = (
        f"1. Call rl_select_environment('{environment}')."
        if environment
        else "1. Unless the person already selected one, call rl_list_environments, ask which environment to test, "
        "and call rl_select_environment(name)."
    )
    args = []
    if models:
        args.append(f"models={models!r}")
    if num_steps:
        args.append(f"num_steps={num_steps}")
    call = f"rl_test_inference({', '.join(args)})"
    return f"""Smoke-test an environment across models with real inference (no training), using the mcp-rl tools.

{_smoke_test_line(state)}

{select}
2. Call {call}. It answers within the server's time budget; if the state is still running, collect it with \
rl_get_test_result(test_id, wait_s=40) until every model has ended (rl_cancel_test(test_id) stops it; \
rl_list_tests lists earlier tests).
3. Show one table, a row per model: accuracy (share of completions scoring above 0), mean score and spread, \
steps with a correct answer, errors. Quote one sample rollout of the best and of the worst model \
(rl://tests/<test_id>/<model>/jsonl has the scored groups).
4. Conclude: does the environment work (prompts built, output parsed, scores vary)? Which model is the best \
starting point for training: one that is sometimes right and sometimes wrong learns most (all 0 or all \
perfect gives nothing to learn from)? If a model errored, show the log tail and the likely fix."""


def tune_config_text(field: str, goal: str | None) -> str:
    aim = f" The person's goal: {goal}." if goal else ""
    return f"""Help the person set the config field `{field}` of the selected environment or run.{aim}

1. Call rl_get_current_config. Find `{field}` under configurable_fields or run_options (it may be locked: \
locked_fields are set by mcp-rl and cannot be changed; say so and stop). If no environment is selected, \
ask which one and call rl_select_environment first.
2. Explain in two or three sentences what `{field}` does in this environment or in training, its type, \
default and current value, and how it interacts with related settings (e.g. batch_size must be a multiple \
of group_size).
3. Propose a value for the goal, with the trade-off (speed, cost, stability). Ask the person to confirm.
4. Call rl_edit_config('{field}', <value>). If it is refused, read the reason, propose a valid value and ask \
again. Finish by showing the field's new value from rl_get_current_config."""


def register(mcp: MCPServer, state: AppState) -> None:
    @mcp.prompt(
        title="Train a model on an environment",
        description="The whole training workflow: choose and configure an environment, smoke-test it, confirm with "
        "you, start the run, watch it and collect the results and weights.",
    )
    def train_environment(
        environment: Environment = None,
        goal: Annotated[
            str | None, Field(description="What the trained model should get better at (optional).")
        ] = None,
    ) -> str:
        return train_environment_text(state, environment, goal)

    @mcp.prompt(
        title="Diagnose a training run",
        description="Find out why a run failed or is not learning: status, logs, metrics, the likely cause and the fix.",
    )
    def diagnose_run(run_id: RunIdArg) -> str:
        run_id = run_id.strip()
        return diagnose_run_text(run_id, _recorded_runs(state, [run_id]))

    @mcp.prompt(
        title="Compare training runs",
        description="Put the results and configs of several runs side by side and say which learned most and why.",
    )
    def compare_runs(
        run_ids: Annotated[str, Field(description=f"Two to {MAX_COMPARED_RUNS} run ids, separated by commas.")],
    ) -> str:
        ids = list(dict.fromkeys(_split(run_ids)))
        if not 2 <= len(ids) <= MAX_COMPARED_RUNS:
            raise MCPError(
                INVALID_PARAMS, f"Give 2 to {MAX_COMPARED_RUNS} different run ids separated by commas (got {len(ids)})."
            )
        return compare_runs_text(ids, _recorded_runs(state, ids))

    @mcp.prompt(
        title="Smoke-test an environment across models",
        description="Run the selected (or named) environment against several models with real inference, no "
        "training: does it work, and which model is the best starting point?",
    )
    def smoke_test_models(
        environment: Environment = None,
        models: Annotated[
            str | None,
            Field(
                description="Models separated by commas: OpenRouter ids (e.g. qwen/qwen3-8b) and/or 'local'; "
                "empty: the server's defaults."
            ),
        ] = None,
        num_steps: Annotated[str | None, Field(description="Items per model, 1 to 20 (default 3).")] = None,
    ) -> str:
        steps = None
        if num_steps is not None and num_steps.strip():
            try:
                steps = int(num_steps)
            except ValueError:
                steps = 0
            if not 1 <= steps <= 20:
                raise MCPError(INVALID_PARAMS, f"num_steps must be a whole number from 1 to 20 (got {num_steps!r}).")
        return smoke_test_text(state, environment, _split(models), steps)

    @mcp.prompt(
        title="Change a config field",
        description="Explain one config field or run option, propose a value for your goal and set it after you confirm.",
    )
    def tune_config(
        field: Annotated[str, Field(description="A config field or run option (e.g. learning_rate, total_steps).")],
        goal: Annotated[str | None, Field(description="What the change should achieve (optional).")] = None,
    ) -> str:
        field = field.strip()
        if not field:
            raise MCPError(
                INVALID_PARAMS, "field is empty: name a field from rl_get_current_config, e.g. learning_rate."
            )
        return tune_config_text(field, goal)
