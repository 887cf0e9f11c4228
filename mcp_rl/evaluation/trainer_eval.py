"""The trainer's held-out evaluation: the run's held-out items sampled through the trainer's own
sampler (the current weights, the environment's evaluation sampling), graded, saved per item in
the run folder and summarised as `eval/...` metrics, compared with the run's first evaluation
(the base model, step 0).

Atropos calls an environment's evaluate() only when the step counter crosses steps_per_eval,
never at step 0, and only the environment sees the outcomes; doing it here gives a base number
at step 0, the same items at every evaluation, and per-item outcomes for a paired test.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from mcp_rl.evaluation.heldout import HeldOutSet, NoHeldOutItems, held_out_set
from mcp_rl.evaluation.outcomes import ItemOutcome, evaluated_steps, read_outcomes, write_outcomes
from mcp_rl.evaluation.stats import paired_comparison
from mcp_rl.runconfig import RunConfig
from mcp_rl.rundir import (
    EVAL_BASE_SCORE_KEY,
    EVAL_CI_HIGH_KEY,
    EVAL_CI_LOW_KEY,
    EVAL_DIFFERENCE_KEY,
    EVAL_N_KEY,
    EVAL_P_VALUE_KEY,
    EVAL_SCORE_KEY,
    EVAL_SECONDS_KEY,
    STEP_KEY,
    TIME_KEY,
    eval_outcomes_file,
    read_jsonl,
)
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

    def due(self, step: int) -> bool:
        return step == self.num_steps or (self.every > 0 and step % self.every == 0)

    def held_out(self) -> HeldOutSet | None:
        if self._set is None and self._unavailable is None:
            try:
                self._set = held_out_set(self.config.environment, self.config.env)
            except NoHeldOutItems as exc:
                self._unavailable = str(exc)
                log.info("no held-out evaluation: %s", exc)
            except Exception as exc:  # a broken item source must not end the run
                self._unavailable = f"{type(exc).__name__}: {exc}"
                log.warning("held-out items could not be made; no held-out evaluation", exc_info=True)
        return self._set

    def evaluate(self, sampler: Sampler, step: int) -> dict[str, Any]:
        """Evaluate the current weights at `step` (blocking). Returns the `eval/...` metrics
        ({} when there is nothing to evaluate or the evaluation failed: the run goes on)."""
        items = self.held_out()
        if items is None:
            return {}
        began = time.monotonic()
        try:
            completions = sample_completions(sampler, items)
        except Exception:
            log.warning("held-out evaluation at step %d failed; training goes on", step, exc_info=True)
            return {}
        outcomes = [
            ItemOutcome(item=item.id, score=items.grade(item, text), completion=text)
            for item, text in zip(items.items, completions, strict=True)
        ]
        write_outcomes(eval_outcomes_file(self.run_dir, step), outcomes)
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


def sample_completions(sampler: Sampler, items: HeldOutSet) -> list[str]:
    """One completion per item, in item order, with the set's sampling."""
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
        return [tokenizer.decode(tokens, skip_special_tokens=True) for tokens in outputs]
    batch = getattr(sampler, "sample_batch", None)
    if batch is not None and not getattr(sampler, "remote", False):
        results = []
        for i in range(0, len(requests), LOCAL_CHUNK):
            results.extend(batch(requests[i : i + LOCAL_CHUNK]))
    else:
        with ThreadPoolExecutor(CONCURRENT_REQUESTS, thread_name_prefix="eval") as pool:
            results = list(pool.map(sampler.sample, requests))
    return [tokenizer.decode(seqs[0].tokens, skip_special_tokens=True) if seqs else "" for seqs in results]


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
