"""The detached worker of one checkpoint evaluation: `python -m mcp_rl.evaluation.worker --dir DIR`.

It answers the run environment's held-out items with each model in turn (the checkpoint first,
then its base, then any others), with the environment's evaluation sampling (greedy unless it
says otherwise), grades them with the environment's own grader, and compares the checkpoint
with each other model item by item (mcp_rl.proof.stats). `result.json` is rewritten
atomically as items are answered, so a reader always sees a whole, current answer.

How each model is sampled:
- a local run's checkpoint: base + its saved LoRA adapter, loaded here (merged); its base: the
  base model alone. One model in memory at a time.
- a Tinker run's checkpoint: `ServiceClient.create_sampling_client(model_path=<sampler path>)`;
  its base: `create_sampling_client(base_model=...)`, through the real SDK.
- an OpenRouter id: its chat completions endpoint (the key stays in this process).

Costs (mcp_rl.costs.evaluation): every model's tokens are counted as they are sampled (Tinker:
the backend's meter at its SDK calls; OpenRouter: each response's `usage`, with usage accounting
asked for so it carries `cost`), priced at the spec's rates and written into the result. With a
cap, before each chunk of items the worker checks that the chunk's most could not pass it, and
stops (state "stopped", the cause in words) when it could.
"""

from __future__ import annotations

import gc
import logging
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mcp_rl.atomic import write_text_atomic
from mcp_rl.background import worker_main
from mcp_rl.costs.evaluation import CHUNK_ITEMS, ModelPricing, cap_stop, evaluation_cost
from mcp_rl.environments.discovery import declared_env_vars
from mcp_rl.environments.mcp_family.taskfile import keys_needed
from mcp_rl.evaluation.checkpoint_models import (
    OUTCOMES_DIR,
    RESULT_FILE,
    SPEC_FILE,
    CheckpointInfo,
    Comparison,
    EvalModel,
    EvalSpec,
    EvalState,
    EvaluationResult,
    ModelProgress,
    SamplePair,
)
from mcp_rl.proof.env_eval import DEFAULT_TIMEOUT_S
from mcp_rl.proof.heldout import HeldOutSet, held_out_set
from mcp_rl.proof.outcomes import ItemOutcome, read_outcomes, read_sampling, write_outcomes
from mcp_rl.proof.stats import paired_comparison
from mcp_rl.proof.verdict import judge
from mcp_rl.rundir import JUDGE_SPEND_FILE, eval_outcomes_file
from mcp_rl.settings import Settings

if TYPE_CHECKING:
    from mcp_rl.trainer.trainer_eval import SampledAnswer

log = logging.getLogger("mcp_rl.evaluation.worker")

# Items of a paid model per progress update and cost-cap check (a local model: the run's batches).
CHUNK = CHUNK_ITEMS
OPENROUTER_CONCURRENCY = 8
FLIPS_LISTED = 20
TINKER_CREATE_TIMEOUT_S = 300.0
REUSED_NOTE = "reused from the run's step-0 evaluation (same items, greedy, same model)"


class Cancelled(Exception):
    pass


class CapReached(Exception):
    """The next chunk could pass the evaluation's cost cap; the message is the cause."""


class EvalWorker:
    def __init__(self, folder: Path, settings: Settings) -> None:
        self.dir = folder
        self.settings = settings
        self.spec = EvalSpec.model_validate_json((folder / SPEC_FILE).read_text(encoding="utf-8"))
        self.stop = threading.Event()
        self.result = EvaluationResult.model_validate_json((folder / RESULT_FILE).read_text(encoding="utf-8"))
        self.outcomes: dict[str, list[ItemOutcome]] = {}
        # model id -> (prompt tokens, completion tokens, reported USD or None)
        self.used: dict[str, tuple[int, int, float | None]] = {}
        self.pricing: dict[str, ModelPricing] = {p.model: p for p in self.spec.pricing}
        self._used_lock = threading.Lock()

    # -- result ----------------------------------------------------------------------------
    def write(self, state: EvalState = "running", message: str | None = None) -> None:
        now = time.time()
        update: dict[str, Any] = {
            "state": state,
            "updated_at": now,
            "elapsed_s": round(now - self.result.started_at, 2),
        }
        if state != "running":
            update["finished_at"] = now
        update["message"] = message or self._message(state)
        if self.spec.pricing:
            with self._used_lock:
                used = dict(self.used)
            update["cost"] = evaluation_cost(self.spec.pricing, used, self.spec.max_cost_usd)
        self.result = self.result.model_copy(update=update)
        write_text_atomic(self.dir / RESULT_FILE, self.result.model_dump_json(indent=1))

    def _message(self, state: EvalState) -> str:
        done = sum(m.done for m in self.result.models)
        total = sum(m.total for m in self.result.models) or 1
        if state == "running":
            return f"Evaluating: {done} of {total} answers ({100 * done / total:.0f} %)."
        # The comparison with the base reads as the verdict (beside the constant answer), the others as tests.
        firsts = [
            self.result.sentence if self.result.sentence and c.against == self._base_id() else c.stats.sentence
            for c in self.result.comparisons
        ] + self.result.warnings
        if state == "completed":
            return " ".join(firsts) or "Evaluated; no comparison could be made (see models[].error)."
        return f"The evaluation {state}." + (" " + " ".join(firsts) if firsts else "")

    def _base_id(self) -> str | None:
        return next((m.id for m in self.spec.models if m.role == "base"), None)

    def _progress(self, index: int, **update: Any) -> None:
        models = list(self.result.models)
        models[index] = models[index].model_copy(update=update)
        self.result = self.result.model_copy(update={"models": models})
        self.write()

    # -- the loop --------------------------------------------------------------------------
    def run(self) -> EvalState:
        try:
            if self.spec.own_evaluate:
                return self._run_own_evaluate()
            items = held_out_set(self.spec.environment, self.spec.env_config).limited(self.spec.held_out_limit)
            n = len(items.items)
            models = [m.model_copy(update={"total": n}) for m in self.result.models]
            self.result = self.result.model_copy(update={"items": n, "held_out": items.description, "models": models})
            self.write()
            for index, model in enumerate(self.spec.models):
                if self.stop.is_set():
                    raise Cancelled
                self._evaluate(index, model, items)
                self._compare({item.id: item.reference for item in items.items})
            self._judge(items)
            state: EvalState = "completed" if self.result.models[0].state == "done" else "failed"
            self.write(state)
            return state
        except Cancelled:
            self.write("cancelled")
            return "cancelled"
        except CapReached as cause:
            self.write("stopped", f"Stopped: {cause}. Models evaluated before it are compared above.")
            return "stopped"
        except BaseException as exc:
            log.exception("evaluation worker crashed")
            self.write("failed", f"The evaluation worker failed: {type(exc).__name__}: {exc}")
            raise

    def _evaluate(self, index: int, model: EvalModel, items: HeldOutSet) -> None:
        began = time.monotonic()
        self._progress(index, state="running", total=len(items.items))
        reused = self._reused_base(model, items)
        if reused is not None:
            self._done(index, model, reused, began, REUSED_NOTE)
            return
        try:
            answers = self._complete(model, items, lambda done: self._progress(index, done=done))
        except Cancelled:
            raise
        except CapReached as cause:
            self._progress(index, state="failed", error=f"stopped: {cause}")
            raise
        except Exception as exc:
            log.warning("model %s failed", model.id, exc_info=True)
            self._progress(index, state="failed", error=f"{type(exc).__name__}: {exc}")
            return
        # the trainer's own grading and marks (at max_tokens, prompt echo)
        from mcp_rl.trainer.trainer_eval import item_outcomes

        self._done(index, model, item_outcomes(items, answers), began)

    def _done(
        self, index: int, model: EvalModel, outcomes: list[ItemOutcome], began: float, note: str | None = None
    ) -> None:
        path = self.dir / OUTCOMES_DIR / f"{model.slug}.jsonl"
        write_outcomes(path, outcomes)
        self.outcomes[model.id] = outcomes
        scores = [o.score for o in outcomes]
        self._progress(
            index,
            state="done",
            done=len(outcomes),
            score=sum(scores) / len(scores),
            seconds=round(time.monotonic() - began, 2),
            outcomes_file=str(path),
            note=note,
        )

    def _reused_base(self, model: EvalModel, items: HeldOutSet) -> list[ItemOutcome] | None:
        """The run's own step-0 outcomes, when they are exactly what decoding the base here would
        give: the run's base model alone (no earlier run's weights), greedy, the same max_tokens and
        the same items in the same order. Greedy decoding is deterministic, so the figures are the
        same and the base's half of the call costs nothing. Anything else (another item set or
        held_out_limit, a Tinker or OpenRouter model, a run folder without the sampling record):
        None, and the base is decoded here."""
        spec = self.spec
        if model.role != "base" or model.kind != "local" or spec.run_dir is None or items.temperature != 0:
            return None
        run_dir = Path(spec.run_dir)
        sampling = read_sampling(run_dir, 0)
        if (
            sampling is None
            or sampling.temperature != 0
            or sampling.max_tokens != items.max_tokens
            or sampling.base_model != spec.run_base_model
            or sampling.init_from is not None
            or sampling.items != len(items.items)
        ):
            return None
        # the folder the trainer loaded is the one this evaluation would load (same weights, same chat template)
        if model.base_model is None or model.weights is not None or sampling.model_dir is None:
            return None
        if Path(sampling.model_dir).resolve() != Path(model.base_model).resolve():
            return None
        outcomes = read_outcomes(eval_outcomes_file(run_dir, 0))
        if [o.item for o in outcomes] != [item.id for item in items.items]:
            return None
        log.info("the base's outcomes reused from %s (step 0)", run_dir)
        return outcomes

    def _compare(self, references: dict[str, str | None]) -> None:
        """Each other model against the trained one; `references`: the item's reference answer by
        item id (shown beside the sample pairs; never the grader's key, a task's item index)."""
        trained = self.spec.models[0]
        mine = self.outcomes.get(trained.id)
        if mine is None:
            return
        done = {c.against for c in self.result.comparisons}
        comparisons = list(self.result.comparisons)
        for other in self.spec.models[1:]:
            mine = self.outcomes[trained.id]
            theirs = self.outcomes.get(other.id)
            if theirs is None or other.id in done:
                continue
            # Paired by item id (an environment's own evaluate() may report its items in any order).
            by_id = {o.item: o for o in theirs}
            pairs = [(m, by_id[m.item]) for m in mine if m.item in by_id]
            if not pairs:
                continue
            mine, theirs = [m for m, _ in pairs], [o for _, o in pairs]
            stats = paired_comparison(
                [o.score for o in theirs],
                [o.score for o in mine],
                items=f"{self.spec.environment.name} held-out items",
                base_name=other.id if other.role != "base" else "the base",
                trained_name=trained.id,
            )
            improved = [m.item for m, o in zip(mine, theirs, strict=True) if m.score > o.score]
            regressed = [m.item for m, o in zip(mine, theirs, strict=True) if m.score < o.score]
            by_item = {o.item: o for o in theirs}
            picks = _interleave(improved, regressed)[: self.spec.samples_per_comparison]
            samples = [
                SamplePair(
                    item=m.item,
                    answer=references.get(m.item),
                    trained_completion=m.completion[:600],
                    trained_score=m.score,
                    other_completion=by_item[m.item].completion[:600],
                    other_score=by_item[m.item].score,
                )
                for m in mine
                if m.item in picks
            ]
            comparisons.append(
                Comparison(
                    trained=trained.id,
                    against=other.id,
                    stats=stats,
                    improved=improved[:FLIPS_LISTED],
                    regressed=regressed[:FLIPS_LISTED],
                    improved_count=len(improved),
                    regressed_count=len(regressed),
                    samples=samples,
                )
            )
        self.result = self.result.model_copy(update={"comparisons": comparisons})
        self.write()

    def _judge(self, items: HeldOutSet | None) -> None:
        """The checkpoint against its base beside the best constant answer (`items`: None for an
        environment's own evaluate(), whose items are not ours to grade): the run's own verdict."""
        trained = self.spec.models[0]
        base = self._base_id()
        mine = self.outcomes.get(trained.id)
        theirs = self.outcomes.get(base) if base is not None else None
        against = next((c for c in self.result.comparisons if c.against == base), None)
        if mine is None or theirs is None or against is None:
            return
        constant = None
        if items is not None:
            try:
                constant = items.constant_baseline(
                    {
                        f"step {self.spec.step}": [o.completion for o in mine],
                        "step 0 (the base)": [o.completion for o in theirs],
                    }
                )
            except Exception:  # a baseline that cannot be made leaves the figures as they are
                log.warning("the constant-answer baseline could not be made", exc_info=True)
        by_id = {o.item: o for o in theirs}
        pairs = [(by_id[m.item], m) for m in mine if m.item in by_id]
        verdict = judge(against.stats.sentence, [b for b, _ in pairs], [t for _, t in pairs], constant)
        # the fields as they are (model_copy does not validate: a dump would leave dicts behind)
        self.result = self.result.model_copy(
            update={name: getattr(verdict, name) for name in type(verdict).model_fields}
        )

    # -- an environment's own evaluate() ----------------------------------------------------
    def _run_own_evaluate(self) -> EvalState:
        """Each model served on 127.0.0.1 in turn, the environment's evaluate() run against it
        (mcp_rl.proof.env_eval); its per-item samples are the outcomes compared."""
        for index, model in enumerate(self.spec.models):
            if self.stop.is_set():
                raise Cancelled
            self._evaluate_own(index, model)
            self._compare({})
        self._judge(None)
        state: EvalState = "completed" if self.result.models[0].state == "done" else "failed"
        self.write(state)
        return state

    def _evaluate_own(self, index: int, model: EvalModel) -> None:
        # the run folder's reader and the served sampler: only this kind of evaluation needs them
        from mcp_rl.ports import allocate_ports
        from mcp_rl.proof.env_eval import run_environment_evaluate
        from mcp_rl.trainer.batcher import batching_sampler
        from mcp_rl.trainer.inference_server import InferenceService, ServerThread, build_app

        began = time.monotonic()
        self._progress(index, state="running")
        env = self.spec.environment
        sampler = None
        server = None
        try:
            if model.kind != "local":
                raise RuntimeError(f"{model.kind} models cannot serve an environment's own evaluate() yet")
            sampler = batching_sampler(self._local_sampler(model), self.settings)
            (port,) = allocate_ports(1)
            server = ServerThread(
                build_app(InferenceService(sampler), sampling_concurrency=sampler.max_requests), "127.0.0.1", port
            )
            server.start()
            result = run_environment_evaluate(
                file_path=env.file_path,
                class_name=env.class_name,
                project_root=env.project_root,
                run_yaml={"env": self.spec.env_config, "openai": self.spec.openai},
                base_url=f"http://127.0.0.1:{port}/v1",
                out_dir=self.dir / "env" / model.slug,
                # the environment's own code: the allow-list and what it names, no key of ours but
                # OpenRouter's for an MCP task with a paid judge (its held-out episodes are judged);
                # one spend file for the evaluation's models, so the judge's cap holds for the whole
                # evaluation, not once per model's process
                child_env=self.settings.user_code_env(
                    declared_env_vars(env.file_path, env.class_name, self.spec.env_config)
                    + keys_needed(self.spec.env_config.get("task_file")),
                    MCP_RL_JUDGE_SPEND_FILE=str(self.dir / JUDGE_SPEND_FILE),
                ),
                model_name=model.id,
                timeout_s=DEFAULT_TIMEOUT_S,
            )
            if not result.outcomes:
                raise RuntimeError(
                    "the environment's evaluate() reported no per-item samples with a score (only "
                    f"{result.score_key}={result.score}); pass samples to self.evaluate_log(metrics, samples=...) "
                    "to compare a checkpoint item by item"
                )
        except Exception as exc:
            log.warning("model %s failed", model.id, exc_info=True)
            self._progress(index, state="failed", error=f"{type(exc).__name__}: {exc}")
            return
        finally:
            if server is not None:
                server.stop()
            if sampler is not None:
                sampler.close()
            del sampler
            gc.collect()
        outcomes = result.outcomes
        path = self.dir / OUTCOMES_DIR / f"{model.slug}.jsonl"
        write_outcomes(path, outcomes)
        self.outcomes[model.id] = outcomes
        n = len(outcomes)
        if self.result.items != n:
            models = [m.model_copy(update={"total": n}) for m in self.result.models]
            held_out = f"{n} items of the environment's own evaluate() (its eval split)"
            self.result = self.result.model_copy(update={"items": n, "held_out": held_out, "models": models})
        self._progress(
            index,
            state="done",
            done=n,
            total=n,
            score=sum(o.score for o in outcomes) / n,
            seconds=round(time.monotonic() - began, 2),
            outcomes_file=str(path),
        )

    # -- sampling --------------------------------------------------------------------------
    def _complete(self, model: EvalModel, items: HeldOutSet, progress: Callable[[int], None]) -> list[SampledAnswer]:
        if model.kind == "openrouter":
            return self._complete_openrouter(model, items, progress)
        sampler = self._local_sampler(model) if model.kind == "local" else self._tinker_sampler(model)
        try:
            # the trainer's own evaluation sampling (chat template, greedy, the set's max_tokens)
            from mcp_rl.trainer.trainer_eval import GREEDY_CHUNK, sample_answers

            # A local model answers in the run's own batches (one shared prefix, one forward, one
            # decode loop per prompt length): chunks of 32 cost 5x the run's evaluation of the same
            # items, and far more on a loaded machine (bench/bench_checkpoint_eval.py). A paid
            # model keeps the small chunks its cost cap is checked between.
            size = GREEDY_CHUNK if model.kind == "local" else CHUNK
            texts: list[SampledAnswer] = []
            for start in range(0, len(items.items), size):
                if self.stop.is_set():
                    raise Cancelled
                chunk = items.model_copy(update={"items": items.items[start : start + size]})
                self._check_cap(model, len(chunk.items))
                texts.extend(sample_answers(sampler, chunk))
                self._meter(model, sampler)
                progress(len(texts))
            return texts
        finally:
            del sampler
            gc.collect()

    def _local_sampler(self, model: EvalModel) -> Any:
        # torch and transformers: only this worker loads a local model
        from mcp_rl.trainer.backends.local import LocalBackend, configure_torch_threads

        configure_torch_threads(self.settings.torch_threads)
        assert model.base_model is not None
        adapter = Path(model.weights) if model.weights else None
        return LocalBackend(Path(model.base_model), train=False, seed=0, adapter_dir=adapter)

    def _tinker_sampler(self, model: EvalModel) -> Any:
        # the Tinker SDK: only an evaluation of a Tinker run loads it
        import tinker

        from mcp_rl.trainer.backends.tinker import TinkerBackend, load_tokenizer  # imports the SDK too

        key = self.settings.tinker_api_key
        if key is None:
            raise RuntimeError("TINKER_API_KEY is not set in the server's environment")
        service = tinker.ServiceClient(
            # Tinker's billing API lists usage per session with this metadata (Tinker's console too).
            user_metadata={"mcp_rl_eval_id": self.spec.eval_id, "mcp_rl_evaluated_run_id": self.spec.run_id},
            api_key=key.get_secret_value(),
            base_url=self.settings.tinker_base_url,
        )
        assert model.base_model is not None
        if model.weights:  # the checkpoint's saved sampler weights
            future = service.create_sampling_client(model_path=model.weights)
        else:  # the base model the run started from
            future = service.create_sampling_client(base_model=model.base_model)
        sampling = future.result(timeout=TINKER_CREATE_TIMEOUT_S)
        tokenizer = load_tokenizer(model.tokenizer) if model.tokenizer else sampling.get_tokenizer()
        backend = TinkerBackend(service, base_model=model.base_model, lora_rank=1, tokenizer=tokenizer)
        backend.sampling = sampling
        return backend

    def _complete_openrouter(
        self, model: EvalModel, items: HeldOutSet, progress: Callable[[int], None]
    ) -> list[SampledAnswer]:
        # openai: only an evaluation against a remote model needs it
        import openai

        from mcp_rl.trainer.trainer_eval import SampledAnswer  # the answers built at run time

        key = self.settings.openrouter_api_key
        if key is None:
            raise RuntimeError("OPENROUTER_API_KEY is not set in the server's environment")
        client = openai.OpenAI(
            base_url=self.spec.openrouter_base_url, api_key=key.get_secret_value(), max_retries=3, timeout=120
        )
        done = [0]
        lock = threading.Lock()

        def one(messages: list[dict[str, str]]) -> SampledAnswer:
            if self.stop.is_set():
                raise Cancelled
            response = client.chat.completions.create(
                model=model.id,
                messages=messages,  # type: ignore[arg-type]
                temperature=items.temperature,
                max_tokens=items.max_tokens,
                # OpenRouter usage accounting: the response's `usage` then carries `cost`.
                extra_body={"usage": {"include": True}},
            )
            self._account(model, response.usage)
            with lock:
                done[0] += 1
            choice = response.choices[0]
            return SampledAnswer(choice.message.content or "", choice.finish_reason == "length")

        texts: list[SampledAnswer] = []
        with ThreadPoolExecutor(OPENROUTER_CONCURRENCY, thread_name_prefix="eval-or") as pool:
            for start in range(0, len(items.items), CHUNK):
                batch = [item.messages for item in items.items[start : start + CHUNK]]
                self._check_cap(model, len(batch))
                texts.extend(pool.map(one, batch))
                progress(len(texts))
        return texts

    # -- costs -----------------------------------------------------------------------------
    def _check_cap(self, model: EvalModel, next_items: int) -> None:
        pricing = self.pricing.get(model.id)
        if pricing is None or self.spec.max_cost_usd is None:
            return
        with self._used_lock:
            used = dict(self.used)
        cause = cap_stop(evaluation_cost(self.spec.pricing, used, self.spec.max_cost_usd), pricing, next_items)
        if cause is not None:
            raise CapReached(cause)

    def _meter(self, model: EvalModel, sampler: Any) -> None:
        """A Tinker sampler's metered tokens so far (prefill, sampled) for this model."""
        total = getattr(getattr(sampler, "meter", None), "total", None)
        if total is None:
            return
        with self._used_lock:
            self.used[model.id] = (int(total.prefill), int(total.sampled), None)

    def _account(self, model: EvalModel, usage: Any) -> None:
        """One OpenRouter response's usage: tokens, and the cost it reports (usage accounting)."""
        if usage is None:
            return
        extra = getattr(usage, "model_extra", None) or {}
        cost = extra.get("cost", getattr(usage, "cost", None))
        reported = float(cost) if isinstance(cost, int | float) and not isinstance(cost, bool) else None
        with self._used_lock:
            prompt, completion, so_far = self.used.get(model.id, (0, 0, None))
            if reported is not None:
                so_far = (so_far or 0.0) + reported
            self.used[model.id] = (
                prompt + int(getattr(usage, "prompt_tokens", 0) or 0),
                completion + int(getattr(usage, "completion_tokens", 0) or 0),
                so_far,
            )


def _interleave(a: list[str], b: list[str]) -> list[str]:
    out: list[str] = []
    for i in range(max(len(a), len(b))):
        out.extend(x[i] for x in (a, b) if i < len(x))
    return out


def initial_result(spec: EvalSpec, checkpoint: CheckpointInfo, n_items: int, held_out: str) -> EvaluationResult:
    now = time.time()
    return EvaluationResult(
        eval_id=spec.eval_id,
        state="running",
        run_id=spec.run_id,
        step=spec.step,
        environment=spec.environment.name,
        items=n_items,
        held_out=held_out,
        checkpoint=checkpoint,
        models=[ModelProgress(model=m.id, role=m.role, total=n_items) for m in spec.models],
        started_at=now,
        updated_at=now,
        elapsed_s=0.0,
        message="Starting: the models are loaded one at a time.",
    )


def main(argv: list[str] | None = None) -> int:
    return worker_main(
        argv,
        module="mcp_rl.evaluation.worker",
        description=__doc__.splitlines()[0],
        make=EvalWorker,
        succeeded=("completed", "stopped"),
    )


if __name__ == "__main__":
    sys.exit(main())
