"""Evaluating a run's saved checkpoint against its base (and other models) on the held-out items
of the run's environment: checking the request, starting the detached worker, reading and
waiting for its result. No MCP types here: the adapter is `mcp_rl.server.evaluation_tools`.

Everything is checked before anything is written or started: the run and step (the answer
lists the saved steps), that a checkpoint exists, that the environment has held-out items, and
that every model to compare with exists (a run checkpoint on disk; an OpenRouter id in the
provider's model list). The checkpoint is read from disk, so a run that is still training can
be evaluated: only weights already saved are used.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from mcp_rl import background
from mcp_rl.atomic import write_text_atomic
from mcp_rl.background import start_worker, worker_alive
from mcp_rl.costs.evaluation import EvaluationEstimate, ItemStats, estimate_evaluation, evaluation_cost, price_models
from mcp_rl.errors import UnknownId, UserError, clip_id
from mcp_rl.evaluation.checkpoint_models import (
    EVAL_ID_RE,
    RESULT_FILE,
    SPEC_FILE,
    WORKER_LOG,
    CheckpointInfo,
    EvalModel,
    EvalSpec,
    EvaluationResult,
    ModelRole,
)
from mcp_rl.evaluation.item_stats import measure
from mcp_rl.evaluation.worker import initial_result
from mcp_rl.model_specs import model_slug
from mcp_rl.models import resolve_model
from mcp_rl.processes import marker_for
from mcp_rl.proof.env_eval import uses_own_evaluate, what_to_add
from mcp_rl.proof.heldout import ITEM_ENVIRONMENTS, NoHeldOutItems, is_task
from mcp_rl.run_checkpoints import (
    TINKER_OPENAI_BASE_URL,
    CheckpointRef,
    is_run_ref,
    load_run,
    resolve_checkpoint,
    resolve_ref,
)
from mcp_rl.rundir import checkpoint_lock, lease_checkpoint
from mcp_rl.settings import Settings

MAX_COMPARE = 4

ProgressCallback = Callable[[float, float, str], Awaitable[None]]


def evaluations_dir(settings: Settings) -> Path:
    return settings.evaluations_dir


def _slug(model_id: str) -> str:
    return model_slug(model_id)  # the same rule as the smoke tests' model folders


def _checkpoint_model(settings: Settings, ref: CheckpointRef, role: ModelRole) -> EvalModel:
    if ref.backend == "local":
        base = str(resolve_model(settings, ref.base_model))
        return EvalModel(
            id=ref.model_id, role=role, kind="local", slug=_slug(ref.model_id), base_model=base, weights=ref.weights
        )
    return EvalModel(
        id=ref.model_id,
        role=role,
        kind="tinker",
        slug=_slug(ref.model_id),
        base_model=ref.base_model,
        weights=ref.weights,
        tokenizer=_tinker_tokenizer(settings, ref),
    )


def _tinker_tokenizer(settings: Settings, ref: CheckpointRef) -> str | None:
    config = load_run(settings, ref.run_id)
    path = config.trainer.tokenizer_path or (str(settings.tokenizer_path) if settings.tokenizer_path else None)
    return path


def _base_model(settings: Settings, ref: CheckpointRef) -> EvalModel:
    if ref.backend == "local":
        base = str(resolve_model(settings, ref.base_model))
        model_id = f"base:{Path(base).name}"
        return EvalModel(id=model_id, role="base", kind="local", slug=_slug(model_id), base_model=base)
    model_id = f"base:{ref.base_model}"
    return EvalModel(
        id=model_id,
        role="base",
        kind="tinker",
        slug=_slug(model_id),
        base_model=ref.base_model,
        tokenizer=_tinker_tokenizer(settings, ref),
    )


def _others(settings: Settings, ref: CheckpointRef, compare_with: list[str] | None) -> list[EvalModel]:
    ids: list[str] = []
    for raw in compare_with or []:
        model_id = raw.strip()
        if not model_id:
            raise UserError("compare_with holds an empty id. Give OpenRouter ids or run:<run_id>[@<step>].")
        if model_id not in ids:
            ids.append(model_id)
    if len(ids) > MAX_COMPARE:
        raise UserError(f"At most {MAX_COMPARE} models in compare_with (got {len(ids)}).")
    models: list[EvalModel] = []
    remote: list[str] = []
    for model_id in ids:
        if is_run_ref(model_id):
            other = resolve_ref(settings, model_id)
            if other.model_id == ref.model_id:
                raise UserError(f"{model_id} is the checkpoint being evaluated; compare it with another one.")
            models.append(_checkpoint_model(settings, other, "other"))
        else:
            remote.append(model_id)
            models.append(EvalModel(id=model_id, role="other", kind="openrouter", slug=_slug(model_id)))
    if remote:
        _check_openrouter(settings, remote)
    slugs: set[str] = set()
    for i, m in enumerate(models):
        slug, n = m.slug, 2
        while slug in slugs:
            slug, n = f"{m.slug}-{n}", n + 1
        slugs.add(slug)
        models[i] = m.model_copy(update={"slug": slug})
    return models


def _check_openrouter(settings: Settings, ids: list[str]) -> None:
    """Unknown OpenRouter ids and a refused key are bad input, said before anything starts."""
    key = settings.openrouter_api_key
    if key is None:
        raise UserError(
            f"{', '.join(ids)}: OpenRouter models need OPENROUTER_API_KEY in the server's environment. "
            "Compare with a run's checkpoint (run:<run_id>[@<step>]) instead, or set the key."
        )
    # the smoke tests' free checks (GET /models, GET /key); httpx only when asked
    from mcp_rl.inference_test.gateway import preflight

    checked = preflight(settings.openrouter_base_url, key.get_secret_value(), ids)
    if checked.causes:
        raise UserError(" ".join(f"{m}: {cause}" for m, cause in checked.causes.items()))


def plan(
    settings: Settings, run_id: str, step: int | None, compare_with: list[str] | None
) -> tuple[EvalSpec, CheckpointInfo]:
    """The evaluation asked for, checked (raises UserError/NotFound; nothing is written)."""
    ref = resolve_checkpoint(settings, run_id, step)
    config = load_run(settings, run_id)
    name = config.environment.name
    task = is_task(config.environment)
    own_evaluate = (
        name not in ITEM_ENVIRONMENTS
        and not task
        and uses_own_evaluate(name, config.environment.file_path, config.environment.class_name)
    )
    if name not in ITEM_ENVIRONMENTS and not task and not own_evaluate:
        env = config.environment
        raise NoHeldOutItems(what_to_add(name, env.class_name, env.file_path))
    if own_evaluate and (ref.backend != "local" or compare_with):
        raise UserError(
            f"environment {name!r} is evaluated by its own evaluate() against each model served locally: "
            "only a local run's checkpoint against its base can be evaluated this way (no compare_with, no Tinker run)."
        )
    if ref.backend == "tinker" and settings.tinker_api_key is None:
        raise UserError(
            f"Run {run_id} trained on Tinker: evaluating its checkpoint needs TINKER_API_KEY in the server's environment."
        )
    models = [
        _checkpoint_model(settings, ref, "trained"),
        _base_model(settings, ref),
        *_others(settings, ref, compare_with),
    ]
    eval_id = background.new_job_id()
    spec = EvalSpec(
        eval_id=eval_id,
        created_at=time.time(),
        run_id=run_id,
        step=ref.step,
        environment=config.environment,
        env_config=dict(config.env),
        held_out_limit=config.trainer.held_out_limit,
        models=models,
        openrouter_base_url=settings.openrouter_base_url,
        own_evaluate=own_evaluate,
        openai=[dict(server) for server in config.openai],
        run_dir=str(settings.runs_dir / run_id) if ref.backend == "local" and not own_evaluate else None,
        run_base_model=config.trainer.base_model,
    )
    info = CheckpointInfo(
        model=ref.model_id,
        weights=ref.weights,
        backend=ref.backend,
        base_model=ref.base_model,
        final=ref.final,
        tinker_openai_model=ref.weights if ref.backend == "tinker" else None,
        tinker_openai_base_url=TINKER_OPENAI_BASE_URL if ref.backend == "tinker" else None,
    )
    return spec, info


@dataclass
class Planned:
    """A checked evaluation with its estimate, not started yet (nothing written)."""

    spec: EvalSpec
    info: CheckpointInfo
    estimate: EvaluationEstimate
    stats: ItemStats | None  # None: every model is free (the items are counted by the worker)


def plan_priced(
    settings: Settings,
    run_id: str,
    step: int | None = None,
    compare_with: list[str] | None = None,
    max_cost_usd: float | None = None,
) -> Planned:
    """plan(), priced: each model's rates and the estimate before anything starts. A paid
    evaluation counts its held-out items first (a child process, with a deadline)."""
    spec, info = plan(settings, run_id, step, compare_with)
    pricing = price_models(settings, [(m.id, m.kind, m.base_model) for m in spec.models])
    stats = None
    if not all(p.free for p in pricing):
        stats = measure(settings, spec.environment, spec.env_config)
        if spec.held_out_limit is not None and stats.items > spec.held_out_limit:
            described = f"the first {spec.held_out_limit} of {stats.description}"
            stats = stats.model_copy(update={"items": spec.held_out_limit, "description": described})
    estimate, pricing = estimate_evaluation(
        stats or ItemStats(items=0, max_tokens=0, prompt_chars=0, messages=0), pricing
    )
    spec = spec.model_copy(update={"pricing": pricing, "max_cost_usd": max_cost_usd})
    return Planned(spec=spec, info=info, estimate=estimate, stats=stats)


def accept_call(planned: Planned, compare_with: list[str] | None) -> str:
    """The exact call that accepts the estimate, with `{cap}` to fill in (str.format)."""
    args = [f"run_id={json.dumps(planned.spec.run_id)}", f"step={planned.spec.step}"]
    if compare_with:
        args.append(f"compare_with={json.dumps(compare_with)}")
    call = "rl_evaluate_checkpoint(" + ", ".join(args)
    return call.replace("{", "{{").replace("}", "}}") + ", max_cost_usd={cap})"


def what(planned: Planned) -> str:
    others = [m.id for m in planned.spec.models[1:]]
    return f"Evaluating {planned.spec.models[0].id} against {', '.join(others)}"


def _result(planned: Planned) -> EvaluationResult:
    spec, stats = planned.spec, planned.stats
    held_out = stats.description if stats else "held-out items of the run's environment (counted once loaded)"
    result = initial_result(spec, planned.info, stats.items if stats else 0, held_out)
    return result.model_copy(
        update={
            "estimated_cost": planned.estimate.as_dict(),
            "cost": evaluation_cost(spec.pricing, {}, spec.max_cost_usd),
        }
    )


def refused(planned: Planned, reason: str) -> EvaluationResult:
    """The answer to an evaluation that needs a yes or a cap and has neither: nothing started."""
    return _result(planned).model_copy(update={"eval_id": "", "state": "refused", "message": reason})


def start_evaluation(
    settings: Settings,
    run_id: str,
    step: int | None = None,
    compare_with: list[str] | None = None,
    max_cost_usd: float | None = None,
) -> EvaluationResult:
    """Check the request, write the spec and start the detached worker; returns at once."""
    return start_planned(settings, plan_priced(settings, run_id, step, compare_with, max_cost_usd))


def start_planned(settings: Settings, planned: Planned) -> EvaluationResult:
    """Write the planned spec and start the detached worker; returns at once."""
    spec = planned.spec
    folder = evaluations_dir(settings) / spec.eval_id
    run_dir = settings.runs_dir / spec.run_id
    argv = [sys.executable, "-m", "mcp_rl.evaluation.worker", "--dir", str(folder)]
    # The checkpoint is leased to the worker for its life: retention and rl_delete_checkpoint
    # leave it alone until the evaluation has ended, however it ends.
    with checkpoint_lock(run_dir):
        resolve_checkpoint(settings, spec.run_id, spec.step)  # deleted or pruned since the plan: refused
        folder.mkdir(parents=True, mode=0o700)
        spec_text = spec.model_dump_json(indent=1)
        write_text_atomic(folder / SPEC_FILE, spec_text)
        result = _result(planned)
        write_text_atomic(folder / RESULT_FILE, result.model_dump_json(indent=1))
        lease = lease_checkpoint(run_dir, planned.info.weights, f"evaluation {spec.eval_id}")
        try:
            start_worker(
                argv,
                folder,
                folder / WORKER_LOG,
                settings.child_env(),
                cwd=folder,
                marker=marker_for("eval", folder),
                pass_fds=[lease],
            )
        finally:
            os.close(lease)
    return result


def eval_folder(settings: Settings, eval_id: str) -> Path:
    path = evaluations_dir(settings) / eval_id
    if not EVAL_ID_RE.match(eval_id or "") or not (path / SPEC_FILE).is_file():
        raise UnknownId(
            f"Unknown eval_id {clip_id(eval_id)!r}. rl_evaluate_checkpoint returns it; evaluations are kept in {evaluations_dir(settings)}.",
            "eval_id",
            eval_id,
        )
    return path


def read_evaluation(settings: Settings, eval_id: str) -> EvaluationResult:
    """The latest result (read-only). A running evaluation whose worker died reads as failed."""
    folder = eval_folder(settings, eval_id)
    result = EvaluationResult.model_validate_json((folder / RESULT_FILE).read_text(encoding="utf-8"))
    if result.state != "running" or worker_alive(folder):
        return result
    result = EvaluationResult.model_validate_json((folder / RESULT_FILE).read_text(encoding="utf-8"))
    if result.state != "running":
        return result
    return result.model_copy(
        update={
            "state": "failed",
            "message": f"The evaluation worker exited before it finished; see {folder / WORKER_LOG}.",
        }
    )


def cancel_evaluation(settings: Settings, eval_id: str, timeout_s: float = 30.0) -> EvaluationResult:
    """Stop a running evaluation: its worker ends its models and records "cancelled"; a worker
    still alive after `timeout_s` has its group killed (it then reads as failed). An ended
    evaluation is left as it is."""
    folder = eval_folder(settings, eval_id)
    background.cancel_worker(folder, marker_for("eval", folder), timeout_s)
    return read_evaluation(settings, eval_id)


async def wait_for_evaluation(
    settings: Settings, eval_id: str, timeout_s: float, progress: ProgressCallback | None = None
) -> EvaluationResult:
    """Read the result until it has ended or `timeout_s` passed, reporting answers done."""
    last = -1

    async def report(result: EvaluationResult) -> None:
        nonlocal last
        done = sum(m.done for m in result.models)
        if progress is not None and done > last:
            last = done
            await progress(float(done), float(sum(m.total for m in result.models) or 1), result.message)

    return await background.wait_for_job(
        lambda: read_evaluation(settings, eval_id), lambda r: r.state == "running", timeout_s, report
    )
