"""The trainer's held-out evaluation: the run's held-out items sampled through the trainer's own
sampler (the current weights, the environment's evaluation sampling), graded, saved per item in
the run folder and summarised as `eval/...` metrics, compared with the run's first evaluation
(the base model, step 0).

Atropos calls an environment's evaluate() only when the step counter crosses steps_per_eval,
never at step 0, and only the environment sees the outcomes; doing it here gives a base number
at step 0, the same items at every evaluation, and per-item outcomes for a paired test.

An environment mcp-rl has no items for, whose class has its own evaluate() (an eval split of its
own), is evaluated by that evaluate(), unchanged, against the trainer's inference server at the
same steps (mcp_rl.proof.env_eval): per-item outcomes when it reports them, else its
aggregate score compared unpaired.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mcp_rl.environments.discovery import declared_env_vars
from mcp_rl.environments.mcp_family.taskfile import keys_needed
from mcp_rl.proof.env_eval import DEFAULT_TIMEOUT_S, EnvEvaluation, run_environment_evaluate, uses_own_evaluate
from mcp_rl.proof.heldout import HeldOutSet, NoHeldOutItems, held_out_set
from mcp_rl.proof.outcomes import (
    AggregateScore,
    EvalSampling,
    ItemOutcome,
    evaluated_steps,
    read_aggregates,
    read_outcomes,
    write_aggregate,
    write_constant,
    write_measure,
    write_outcomes,
    write_sampling,
)
from mcp_rl.proof.stats import paired_comparison, unpaired_comparison
from mcp_rl.proof.verdict import last_user_text, repeats_prompt
from mcp_rl.runconfig import RunConfig
from mcp_rl.rundir import (
    EVAL_BASE_SCORE_KEY,
    EVAL_CI_HIGH_KEY,
    EVAL_CI_LOW_KEY,
    EVAL_DIFFERENCE_KEY,
    EVAL_DIR,
    EVAL_N_KEY,
    EVAL_P_VALUE_KEY,
    EVAL_SCORE_KEY,
    EVAL_SECONDS_KEY,
    JUDGE_SPEND_FILE,
    STEP_KEY,
    TIME_KEY,
    eval_outcomes_file,
    read_jsonl,
)
from mcp_rl.settings import Settings
from mcp_rl.trainer.backends.base import Sampler, SamplingRequest

log = logging.getLogger(__name__)

# Prompts per sample_batch call of a local model (one decode loop; the batcher's own limit).
LOCAL_CHUNK = 64
# Prompts per batch of a local model's greedy path (one forward each; a few hundred MB at most).
GREEDY_CHUNK = 256
# Requests in flight at once through a sampler without sample_batch (remote, or the batcher).
CONCURRENT_REQUESTS = 16


class HeldOutEvaluator:
    """When to evaluate (start, every `eval_every` steps, the last step) and how."""

    def __init__(self, config: RunConfig) -> None:
        self.config = config
        self.run_dir: Path = config.paths.run_dir
        self.every = config.trainer.eval_every
        self.num_steps = config.trainer.num_steps
        self._set: HeldOutSet | None = None
        self._unavailable: str | None = None
        # No items here, but the environment's class has its own evaluate(): that is run instead.
        self._own_evaluate = False

    def due(self, step: int) -> bool:
        return step == self.num_steps or (self.every > 0 and step % self.every == 0)

    def held_out(self) -> HeldOutSet | None:
        if self._set is None and self._unavailable is None:
            try:
                limit = self.config.trainer.held_out_limit
                self._set = held_out_set(self.config.environment, self.config.env).limited(limit)
            except NoHeldOutItems as exc:
                self._unavailable = str(exc)
                ref = self.config.environment
                self._own_evaluate = uses_own_evaluate(ref.name, ref.file_path, ref.class_name)
                if self._own_evaluate:
                    log.info("held-out evaluation by the environment's own evaluate() (%s)", exc)
                else:
                    log.info("no held-out evaluation: %s", exc)
            except Exception as exc:  # a broken item source must not end the run
                self._unavailable = f"{type(exc).__name__}: {exc}"
                log.warning("held-out items could not be made; no held-out evaluation", exc_info=True)
        return self._set

    def _write_constant(self, items: HeldOutSet, outcomes: list[ItemOutcome], step: int) -> None:
        """What the best constant answer scores on these items (candidates: this evaluation's and
        the base's most common answers, and the references), beside the outcomes."""
        completions = {f"step {step}": [o.completion for o in outcomes]}
        earlier = evaluated_steps(self.run_dir)
        if earlier and earlier[0] != step:
            completions[f"step {earlier[0]}"] = [
                o.completion for o in read_outcomes(eval_outcomes_file(self.run_dir, earlier[0]))
            ]
        try:
            baseline = items.constant_baseline(completions)
            if baseline is not None:
                write_constant(self.run_dir, step, baseline)
        except Exception:  # a baseline that cannot be made must not end the run
            log.warning("the constant-answer baseline at step %d could not be made", step, exc_info=True)

    def evaluate(self, sampler: Sampler, step: int) -> dict[str, Any]:
        """Evaluate the current weights at `step` (blocking). Returns the `eval/...` metrics
        ({} when there is nothing to evaluate or the evaluation failed: the run goes on)."""
        items = self.held_out()
        if items is None:
            return self._evaluate_own(step) if self._own_evaluate else {}
        began = time.monotonic()
        try:
            answers = sample_answers(sampler, items)
        except Exception:
            log.warning("held-out evaluation at step %d failed; training goes on", step, exc_info=True)
            return {}
        outcomes = item_outcomes(items, answers)
        write_outcomes(eval_outcomes_file(self.run_dir, step), outcomes)
        # how these items were sampled: a checkpoint evaluation reuses the step-0 base outcomes only when it samples the same
        write_sampling(
            self.run_dir,
            EvalSampling(
                step=step,
                max_tokens=items.max_tokens,
                temperature=items.temperature,
                base_model=self.config.trainer.base_model,
                model_dir=str(model_dir) if (model_dir := getattr(sampler, "model_dir", None)) else None,
                init_from=self.config.trainer.init_from,
                items=len(outcomes),
            ),
        )
        self._write_constant(items, outcomes, step)
        seconds = time.monotonic() - began
        scores = [o.score for o in outcomes]
        metrics: dict[str, Any] = {
            EVAL_SCORE_KEY: sum(scores) / len(scores),
            EVAL_N_KEY: len(scores),
            EVAL_SECONDS_KEY: round(seconds, 3),
        }
        metrics.update(compare_with_base(self.run_dir, step))
        log.info(
            "held-out evaluation at step %d: %.3f on %d items (%.1f s)",
            step,
            metrics[EVAL_SCORE_KEY],
            len(scores),
            seconds,
        )
        return metrics

    def _evaluate_own(self, step: int) -> dict[str, Any]:
        """The environment's own evaluate() against the trainer's inference server (blocking)."""
        port = self.config.ports.inference
        if port is None:
            return {}
        ref = self.config.environment
        try:
            result = run_environment_evaluate(
                file_path=ref.file_path,
                class_name=ref.class_name,
                project_root=ref.project_root,
                run_yaml=self.config.model_dump(mode="json"),
                base_url=f"http://127.0.0.1:{port}/v1",
                out_dir=self.run_dir / EVAL_DIR / f"env_step_{step:06d}",
                # the environment's own code: the allow-list (with the run's marker: the child is the
                # run's) and what it names; none of the trainer's keys but OpenRouter's for an MCP
                # task with a paid judge (its held-out episodes are judged)
                child_env=Settings.from_env().user_code_env(
                    declared_env_vars(ref.file_path, ref.class_name, self.config.env)
                    + keys_needed(self.config.env.get("task_file")),
                    MCP_RL_JUDGE_SPEND_FILE=str(self.run_dir / JUDGE_SPEND_FILE),
                ),
                timeout_s=DEFAULT_TIMEOUT_S,
                metric=self.config.trainer.eval_metric,
            )
        except Exception:
            log.warning("the environment's evaluate() at step %d failed; training goes on", step, exc_info=True)
            return {}
        metrics = record_env_evaluation(self.run_dir, step, result)
        log.info(
            "held-out evaluation (the environment's evaluate()) at step %d: %s=%.3f on %s items (%.1f s)",
            step,
            result.score_key,
            result.score or 0.0,
            result.n,
            result.seconds,
        )
        return metrics


def record_env_evaluation(run_dir: Path, step: int, result: EnvEvaluation) -> dict[str, Any]:
    """Save one evaluate() result in the run folder (per-item outcomes, else its aggregate) and
    return its `eval/...` metrics, compared with the run's first evaluation."""
    metrics: dict[str, Any] = {EVAL_SECONDS_KEY: round(result.seconds, 3)}
    if result.source:
        write_measure(run_dir, result.measure())
    if result.outcomes:
        write_outcomes(eval_outcomes_file(run_dir, step), result.outcomes)
        metrics.update({EVAL_SCORE_KEY: result.score, EVAL_N_KEY: len(result.outcomes)})
        metrics.update(compare_with_base(run_dir, step))
        return metrics
    if result.score is None:
        return {}
    write_aggregate(
        run_dir,
        AggregateScore(step=step, score=result.score, n=result.n, score_key=result.score_key, source=result.source),
    )
    metrics[EVAL_SCORE_KEY] = result.score
    if result.n:
        metrics[EVAL_N_KEY] = result.n
    earlier = [a for a in read_aggregates(run_dir) if a.step < step]
    if earlier:
        base = earlier[0]
        compared = unpaired_comparison(base.score, base.n, result.score, result.n)
        metrics[EVAL_BASE_SCORE_KEY] = compared.base_score
        metrics[EVAL_DIFFERENCE_KEY] = compared.difference
        if compared.ci_low is not None:
            metrics[EVAL_CI_LOW_KEY] = compared.ci_low
            metrics[EVAL_CI_HIGH_KEY] = compared.ci_high
        if compared.p_value is not None:
            metrics[EVAL_P_VALUE_KEY] = compared.p_value
    return metrics


@dataclass(frozen=True)
class SampledAnswer:
    """One held-out completion and whether its generation stopped at max_tokens (cut)."""

    text: str
    at_limit: bool | None  # None: the sampler did not say


def sample_completions(sampler: Sampler, items: HeldOutSet) -> list[str]:
    """One completion per item, in item order, with the set's sampling."""
    return [answer.text for answer in sample_answers(sampler, items)]


def sample_answers(sampler: Sampler, items: HeldOutSet) -> list[SampledAnswer]:
    """One completion per item, in item order, with the set's sampling, each marked when its
    generation hit the token limit."""
    tokenizer = sampler.tokenizer
    requests = []
    for item in items.items:
        text = tokenizer.apply_chat_template(item.messages, add_generation_prompt=True, tokenize=False)
        requests.append(
            SamplingRequest(
                prompt_tokens=list(tokenizer.encode(text, add_special_tokens=False)),
                n=1,
                max_tokens=items.max_tokens,
                temperature=items.temperature,
                seed=0,
            )
        )
    greedy = getattr(sampler, "sample_greedy", None)
    if greedy is not None and items.temperature == 0:
        prompts = [r.prompt_tokens for r in requests]
        outputs = []
        for i in range(0, len(prompts), GREEDY_CHUNK):
            outputs.extend(greedy(prompts[i : i + GREEDY_CHUNK], items.max_tokens))
        # The greedy decoder keeps a row's stop token: a row as long as the limit whose last token
        # is not a stop token was cut.
        stops = set(getattr(sampler, "eos_ids", None) or [])
        return [
            SampledAnswer(
                tokenizer.decode(tokens, skip_special_tokens=True),
                len(tokens) >= items.max_tokens and not (tokens and tokens[-1] in stops),
            )
            for tokens in outputs
        ]
    batch = getattr(sampler, "sample_batch", None)
    if batch is not None and not getattr(sampler, "remote", False):
        results = []
        for i in range(0, len(requests), LOCAL_CHUNK):
            results.extend(batch(requests[i : i + LOCAL_CHUNK]))
    else:
        with ThreadPoolExecutor(CONCURRENT_REQUESTS, thread_name_prefix="eval") as pool:
            results = list(pool.map(sampler.sample, requests))
    return [
        SampledAnswer(tokenizer.decode(seqs[0].tokens, skip_special_tokens=True), seqs[0].finish_reason == "length")
        if seqs
        else SampledAnswer("", None)
        for seqs in results
    ]


def item_outcomes(items: HeldOutSet, answers: list[SampledAnswer]) -> list[ItemOutcome]:
    """Each item's graded answer, marked when it stopped at max_tokens or repeats the prompt."""
    return [
        ItemOutcome(
            item=item.id,
            score=items.grade(item, answer.text),
            completion=answer.text,
            group=item.group,
            at_limit=answer.at_limit,
            echo=repeats_prompt(answer.text, last_user_text(item.messages)),
        )
        for item, answer in zip(items.items, answers, strict=True)
    ]


def compare_with_base(run_dir: Path, step: int) -> dict[str, Any]:
    """`eval/base_score`, difference, interval and p of the evaluation at `step` against the
    run's first one (its base), paired by item id; {} at the first evaluation."""
    steps = evaluated_steps(run_dir)
    if not steps or steps[0] >= step:
        return {}
    base = {o.item: o.score for o in read_outcomes(eval_outcomes_file(run_dir, steps[0]))}
    now = {o.item: o.score for o in read_outcomes(eval_outcomes_file(run_dir, step))}
    common = [item for item in now if item in base]
    if not common:
        return {}
    result = paired_comparison([base[i] for i in common], [now[i] for i in common])
    return {
        EVAL_BASE_SCORE_KEY: result.base_score,
        EVAL_DIFFERENCE_KEY: result.difference,
        EVAL_CI_LOW_KEY: result.ci_low,
        EVAL_CI_HIGH_KEY: result.ci_high,
        EVAL_P_VALUE_KEY: result.p_value,
    }


def start_line(metrics_file: Path, step: int, metrics: dict[str, Any]) -> dict[str, Any]:
    """The metrics line of the evaluation before the first step: its own line at step 0; a
    resumed run's step already has a line (the later line wins), so it is kept and extended."""
    previous: dict[str, Any] = {}
    if step > 0:
        for row in read_jsonl(metrics_file).rows:
            if row.get(STEP_KEY) == step:
                previous = row
    return {k: v for k, v in {**previous, **metrics}.items() if k not in (STEP_KEY, TIME_KEY)}
