"""The trainer: registers with the Atropos API, trains on each batch, records every step.

Order of a run:
    load model (resume from the last state checkpoint) -> serve inference -> register ->
    for each step: wait for a batch -> advantages -> forward/backward -> Adam -> new sampler
                   weights -> metrics line (+ W&B) -> periodic checkpoint
    -> final checkpoint -> "done", exit 0.
Any error: "failed" with the message, exit 1. SIGTERM: finish the step in flight, save a
resumable checkpoint, "stopped", exit 0.
"""

from __future__ import annotations

import asyncio
import logging
import math
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

import psutil

from mcp_rl import processes
from mcp_rl.costs.tracker import CostTracker, tracker_for
from mcp_rl.runconfig import RunConfig
from mcp_rl.rundir import (
    COMPLETION_TOKENS_KEY,
    LOSS_KEY,
    REWARD_KEY,
    SINGLE_COMPLETION_GROUPS_KEY,
    STEP_SECONDS_KEY,
    TOKENS_KEY,
    TOP_COMPLETION_SHARE_KEY,
    TrainerPhase,
    TrainerStartup,
    read_index,
)
from mcp_rl.settings import Settings
from mcp_rl.trainer.advantages import BatchStats
from mcp_rl.trainer.atropos_client import AtroposClient
from mcp_rl.trainer.backends.base import (
    AdamParams,
    ForwardBackwardResult,
    RunOutcome,
    TrainingBackend,
    TrainingExample,
)
from mcp_rl.trainer.batcher import BatchingSampler, BatchSampling, batching_sampler
from mcp_rl.trainer.inference_server import InferenceService, ServerThread, build_app
from mcp_rl.trainer.policy_lag import DEFAULT_MAX_LAG, PolicyVersions, TaggingSampler
from mcp_rl.trainer.retention import prune
from mcp_rl.trainer.rollouts import rollout_groups
from mcp_rl.trainer.status import RunRecorder, last_state
from mcp_rl.trainer.step_data import Notices, prepare_step
from mcp_rl.trainer.trainer_eval import HeldOutEvaluator, start_line

log = logging.getLogger(__name__)

HEARTBEAT_S = 2.0
# Finishing a remote session must not hold up the trainer's exit for long.
CLOSE_TIMEOUT_S = 30.0
BackendFactory = Callable[[RunConfig, Settings], TrainingBackend]


def step_name(step: int) -> str:
    return f"step_{step:06d}"


def logprob_metrics(examples: list[TrainingExample], result: ForwardBackwardResult) -> dict[str, float]:
    """Sampler vs. trainer logprobs on the trained tokens (a large diff means off-policy data
    or a sampler that does not match the trained weights)."""
    sampled: list[float] = []
    trained: list[float] = []
    for example, training_lps in zip(examples, result.training_logprobs, strict=True):
        for t, keep in enumerate(example.trained):
            if not keep:
                continue
            trained.append(training_lps[t])
            if example.sampling_logprobs is not None:
                sampled.append(example.sampling_logprobs[t])
    out: dict[str, float] = {}
    if trained:
        out["logprobs/mean_training"] = sum(trained) / len(trained)
    if sampled and len(sampled) == len(trained):
        out["logprobs/mean"] = sum(sampled) / len(sampled)
        out["logprobs/std"] = math.sqrt(sum((x - out["logprobs/mean"]) ** 2 for x in sampled) / len(sampled))
        out["logprobs/diff"] = out["logprobs/mean"] - out["logprobs/mean_training"]
        out["logprobs/abs_diff"] = sum(abs(a - b) for a, b in zip(sampled, trained, strict=True)) / len(sampled)
        # The GEM recipe's names: sample-vs-train KL estimates and the sampled tokens' entropy.
        out["train/kl_sample_train_v1"] = out["logprobs/diff"]
        out["train/kl_sample_train_v2"] = (
            0.5 * sum((a - b) ** 2 for a, b in zip(sampled, trained, strict=True)) / len(sampled)
        )
        out["sampler/token_entropy"] = -out["logprobs/mean"]
    elif trained:
        # No sampler logprobs (an OpenAI-type server): the trainer's own are the only ones.
        out["logprobs/mean"] = out["logprobs/mean_training"]
        out["logprobs/diff"] = 0.0
    return out


def batch_metrics(stats: BatchStats) -> dict[str, Any]:
    return {
        REWARD_KEY: stats.reward_mean,
        "reward/std": stats.reward_std,
        "reward/min": stats.reward_min,
        "reward/max": stats.reward_max,
        "advantages/mean": stats.advantages_mean,
        "advantages/std": stats.advantages_std,
        TOKENS_KEY: stats.tokens,
        "tokens/trained": stats.trained_tokens,
        "batch/groups": stats.groups,
        "batch/sequences": stats.sequences,
        "batch/zero_signal_groups": stats.zero_signal_groups,
        COMPLETION_TOKENS_KEY: stats.completion_tokens_mean,
        SINGLE_COMPLETION_GROUPS_KEY: stats.single_completion_groups,
        TOP_COMPLETION_SHARE_KEY: stats.top_completion_share,
    }


class Trainer:
    def __init__(self, config: RunConfig, settings: Settings, backend_factory: BackendFactory) -> None:
        self.config = config
        self.settings = settings
        self.t = config.trainer
        self.backend_factory = backend_factory
        self.recorder = RunRecorder(config.paths, config.trainer.num_steps)
        self.stop = asyncio.Event()
        self.stop_reason: str | None = None
        self.backend: TrainingBackend | None = None
        self.server: ServerThread | None = None
        self.batcher: BatchingSampler | None = None
        self.ready = threading.Event()
        self.wandb_run: Any = None
        self.last_state_step = 0
        self.final_weights: str | None = None
        self._recorded_sampler: tuple[int, str] | None = None
        # Per-step tokens and estimated cost, and the cost cap (mcp_rl.costs): set once loaded.
        self.costs: CostTracker | None = None
        # Held-out evaluation before the first step, every eval_every steps and after the last.
        self.evaluator = HeldOutEvaluator(config)
        self._notices = Notices()
        # Which step's weights sampled each completion (the policy-lag metric and bound).
        self.versions = PolicyVersions()

    # --- lifecycle --------------------------------------------------------------------------
    def request_stop(self, reason: str) -> None:
        if not self.stop.is_set():
            log.warning("stop requested (%s): finishing the current step, then saving", reason)
            self.stop_reason = reason
            self.stop.set()

    async def run(self) -> int:
        """Exit code: 0 after the last step (or a clean stop) was saved, 1 on any error."""
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            try:
                loop.add_signal_handler(sig, self.request_stop, signal.Signals(sig).name)
            except (NotImplementedError, RuntimeError):  # not the main thread (tests)
                pass
        self.config.paths.run_dir.mkdir(parents=True, exist_ok=True)
        self.config.paths.checkpoints_dir.mkdir(parents=True, exist_ok=True)
        self.recorder.update(phase=TrainerPhase.STARTING)
        beat_stop = threading.Event()
        beat = threading.Thread(target=self._heartbeat, args=(beat_stop,), name="heartbeat", daemon=True)
        beat.start()
        client: AtroposClient | None = None
        # What the backend's session is told at the end: errored unless we get further.
        outcome: RunOutcome = "errored"
        detail: str | None = None
        try:
            began = time.time()
            start_step = await self._load()
            if self.stop.is_set():
                self.recorder.update(phase=TrainerPhase.STOPPED)
                outcome, detail = "interrupted", f"stopped ({self.stop_reason}) before training"
                return 0
            loaded = time.time()
            self._serve()
            self._record_startup(began, loaded)
            client = self._client()
            await self._register(client, start_step)
            await self._evaluate_start(start_step)
            self._init_wandb()
            finished = await self._train(client, start_step)
            await self._finish(finished)
            outcome = "success" if finished else "interrupted"
            detail = None if finished else f"stopped ({self.stop_reason}) after step {self.recorder.status.step}"
            return 0
        except Exception as exc:  # every failure ends here: recorded, then a non-zero exit
            message = f"{type(exc).__name__}: {exc}"
            log.exception("trainer failed")
            self.recorder.update(phase=TrainerPhase.FAILED, error=message)
            detail = message[:500]
            await self._keep_last()
            return 1
        finally:
            if client is not None:
                await client.aclose()
            if self.server is not None:
                self.server.stop()
            if self.batcher is not None:
                self.batcher.close()
            self._close_wandb()
            if self.backend is not None:
                await self._close_backend(outcome, detail)
            beat_stop.set()
            beat.join(5)
            self.recorder.heartbeat()

    async def _close_backend(self, outcome: RunOutcome, detail: str | None) -> None:
        """Tell the backend how the run ended, off the event loop (a remote session's finish is a
        blocking request). A failure or a slow answer is only logged: it never changes the
        run's outcome."""
        assert self.backend is not None
        try:
            await asyncio.wait_for(asyncio.to_thread(self.backend.close, outcome, detail), CLOSE_TIMEOUT_S)
        except TimeoutError:
            log.warning("closing the backend took more than %.0f s; exiting without waiting", CLOSE_TIMEOUT_S)
        except Exception:  # closing must never mask the run's outcome
            log.warning("closing the backend failed", exc_info=True)

    def _heartbeat(self, done: threading.Event) -> None:
        while not done.wait(HEARTBEAT_S):
            try:
                self.recorder.heartbeat()
            except OSError:
                log.exception("writing trainer_status.json failed")

    async def _load(self) -> int:
        self.recorder.update(phase=TrainerPhase.LOADING_MODEL)
        self.backend = await asyncio.to_thread(self.backend_factory, self.config, self.settings)
        self.costs = tracker_for(self.backend, self.config, self.settings)
        start_step = 0
        state = last_state(self.config.paths.checkpoints_index) if self.t.resume else None
        if state is not None:
            log.info("resuming from %s (step %d)", state.path, state.step)
            await asyncio.to_thread(self.backend.load_state, state.path)
            start_step = state.step
            self.last_state_step = state.step
            self.recorder.update(resume_state=state.path, step=start_step)
        elif self.t.init_from:
            log.info("starting from %s (a checkpoint of an earlier run)", self.t.init_from)
            await asyncio.to_thread(self.backend.load_state, self.t.init_from)
        if start_step >= self.t.num_steps:
            raise RuntimeError(
                f"the run already reached step {start_step} of {self.t.num_steps}; nothing left to train"
            )
        await asyncio.to_thread(self.backend.prepare, self._waiting_for_model)
        if self.recorder.status.phase == TrainerPhase.WAITING_FOR_MODEL:
            self.recorder.update(phase=TrainerPhase.LOADING_MODEL)
        self.ready.set()
        return start_step

    def _record_startup(self, began: float, loaded: float) -> None:
        """Where the start-up went (trainer_status.json `startup`; bench/bench_supervisor.py prints it)."""
        created = processes.started_at() or psutil.Process().create_time()
        startup = TrainerStartup(
            interpreter_s=round(max(0.0, began - created), 3),
            backend_s=round(loaded - began, 3),
            serve_s=round(time.time() - loaded, 3),
        )
        self.recorder.update(startup=startup)
        log.info(
            "serving %.2f s after the process started: interpreter and imports %.2f s, backend %.2f s, server %.2f s",
            time.time() - created,
            startup.interpreter_s,
            startup.backend_s,
            startup.serve_s,
        )

    def _waiting_for_model(self, seconds: float) -> None:
        """A remote service is still queueing our model: say so in trainer_status.json."""
        self.recorder.update(phase=TrainerPhase.WAITING_FOR_MODEL, model_wait_s=round(seconds, 1))

    def _serve(self) -> None:
        port = self.config.ports.inference
        if port is None:
            raise RuntimeError("run.yaml has no ports.inference: the supervisor must assign ports before starting")
        assert self.backend is not None
        sampler: Any = self.backend
        # A remote service samples many requests at once; a local model samples the requests
        # that arrive together as one batch (all of them must reach the batcher to be batched).
        concurrency = self.settings.remote_sampling_concurrency if self.backend.remote else 1
        if not self.backend.remote and isinstance(self.backend, BatchSampling):
            self.batcher = sampler = batching_sampler(self.backend, self.settings)
            concurrency = self.batcher.max_requests
        service = InferenceService(TaggingSampler(sampler, self.versions), ready=self.ready)
        app = build_app(
            service,
            extra_health=lambda: {"trainer_step": self.recorder.status.step, "phase": self.recorder.status.phase},
            sampling_concurrency=concurrency,
        )
        self.server = ServerThread(app, "127.0.0.1", port)
        self.server.start()
        log.info("inference server on http://127.0.0.1:%d", port)

    def _client(self) -> AtroposClient:
        url = self.config.env.get("rollout_server_url")
        if not url and self.config.ports.api is not None:
            url = f"http://127.0.0.1:{self.config.ports.api}"
        if not url:
            raise RuntimeError("run.yaml gives no Atropos API address (env.rollout_server_url or ports.api)")
        return AtroposClient(
            url,
            unreachable_timeout_s=self.t.api_unreachable_timeout_s,
            batch_wait_timeout_s=self.t.batch_wait_timeout_s,
        )

    async def _register(self, client: AtroposClient, start_step: int) -> None:
        payload = {
            "wandb_group": self.t.wandb.group or self.config.run_id,
            "wandb_project": self.t.wandb.project,
            "batch_size": self.t.batch_size,
            "max_token_len": self.t.max_token_trainer_length,
            "checkpoint_dir": str(self.config.paths.checkpoints_dir),
            "save_checkpoint_interval": self.t.save_checkpoint_interval,
            "starting_step": start_step,
            "num_steps": self.t.num_steps,
        }
        await client.register(payload, self.stop)
        log.info("registered with the Atropos API at %s (starting_step=%d)", client.base_url, start_step)

    # --- the loop ---------------------------------------------------------------------------
    async def _train(self, client: AtroposClient, start_step: int) -> bool:
        """True when every step ran; False when stopped early."""
        assert self.backend is not None
        adam = AdamParams(
            learning_rate=self.t.learning_rate, beta1=self.t.adam_beta1, beta2=self.t.adam_beta2, eps=self.t.adam_eps
        )
        self.versions.current = start_step
        for step in range(start_step + 1, self.t.num_steps + 1):
            if self.stop.is_set():
                return False
            self.recorder.update(phase=TrainerPhase.WAITING_FOR_BATCH)
            waited_from = time.monotonic()
            batch = await client.get_batch(self.stop)
            if batch is None:
                return False
            began = time.monotonic()
            self.recorder.update(phase=TrainerPhase.TRAINING)
            metrics = await asyncio.to_thread(self._train_step, step, batch, adam)
            metrics["time/wait_for_batch"] = began - waited_from
            if self.batcher is not None:
                metrics.update(self.batcher.step_metrics())
            metrics[STEP_SECONDS_KEY] = time.monotonic() - began
            if self.evaluator.due(step):
                metrics.update(await asyncio.to_thread(self.evaluator.evaluate, self._eval_sampler(), step))
            if self.costs is not None:
                metrics.update(self.costs.step())
            line = self.recorder.metrics(step, metrics)
            self.recorder.update(step=step)
            self._check_cost_cap(step)
            self._log_wandb(step, line)
            log.info(
                "step %d/%d reward/mean=%.3f loss=%.4f %.1fs",
                step,
                self.t.num_steps,
                metrics[REWARD_KEY],
                metrics[LOSS_KEY],
                metrics[STEP_SECONDS_KEY],
            )
            interval = self.t.save_checkpoint_interval
            if interval and step % interval == 0 and step < self.t.num_steps:
                self.recorder.update(phase=TrainerPhase.SAVING)
                await asyncio.to_thread(self._save, step, False)
        return True

    def _eval_sampler(self) -> Any:
        """The backend itself: a local model samples the held-out prompts in large batches of its
        own (its sampling lock keeps the environment's rollouts out meanwhile)."""
        return self.backend

    async def _evaluate_start(self, step: int) -> None:
        """The base's (or the resumed checkpoint's) held-out figures, before any training."""
        metrics = await asyncio.to_thread(self.evaluator.evaluate, self._eval_sampler(), step)
        if metrics:
            self.recorder.metrics(step, start_line(self.config.paths.metrics, step, metrics))

    def _check_cost_cap(self, step: int) -> None:
        """When the next step would pass max_cost_usd, end after this one: the stop saves a
        checkpoint that is kept, and the cause goes to trainer_status.json for the supervisor."""
        cause = self.costs.cap_reached() if self.costs is not None else None
        if cause is None or step >= self.t.num_steps or self.stop.is_set():
            return
        self.recorder.update(stop_cause=cause)
        self.request_stop(cause)

    def _train_step(self, step: int, batch: list[dict[str, Any]], adam: AdamParams) -> dict[str, Any]:
        assert self.backend is not None
        prepared = prepare_step(
            batch,
            max_length=self.t.max_token_trainer_length,
            normalization=self.t.advantage_normalization,
            notices=self._notices,
            environment=f"environment {self.config.environment.name!r}",
            lags=self.versions.lags(batch, step),
            # Tinker: at most one step behind (its importance ratio is unclipped); a local run's
            # queue already holds at most one batch.
            max_lag=DEFAULT_MAX_LAG if self.backend.remote else None,
            mixed_groups_only=bool(self.config.env.get("ensure_scores_are_not_same", False)),
        )
        stats = prepared.stats
        self._keep_rollouts(step, batch, prepared.examples)
        if prepared.trained:
            result, sampler_path = self.backend.train_step(prepared.trained, adam, step)
        else:
            # Nothing can move the weights (every advantage is 0): no forward/backward, no Adam
            # step (its momentum would still move them), the sampler's weights stay current.
            result, sampler_path = ForwardBackwardResult(loss=0.0, training_logprobs=[]), None
        self.versions.current = step  # the sampler now serves this step's weights
        if sampler_path is not None:
            self.recorder.checkpoint(step, "sampler", sampler_path)
            self._recorded_sampler = (step, sampler_path)
        metrics: dict[str, Any] = {LOSS_KEY: result.loss, "train/learning_rate": adam.learning_rate}
        metrics.update(batch_metrics(stats))
        metrics.update(prepared.metrics)
        metrics.update(logprob_metrics(prepared.trained, result))
        metrics.update(result.extra)
        return metrics

    def _keep_rollouts(self, step: int, batch: list[dict[str, Any]], examples: list[TrainingExample]) -> None:
        try:
            self.recorder.rollouts(rollout_groups(step, batch, examples))
        except Exception as exc:  # an environment's odd group (or a full disk) must never cost a training step
            log.warning("could not keep the rollouts of step %d: %s", step, exc)

    def _save(self, step: int, final: bool, keep: bool = False) -> str:
        """A resumable state and the inference weights for `step`, both recorded; returns the
        weights path (only ever a path that was really written). `keep`: saved without expiry
        like a final one (the last checkpoint of a stopped run). Local retention runs after."""
        assert self.backend is not None
        name = step_name(step)
        forever = final or keep
        state, weights = self.backend.save_checkpoint(name, final=forever)
        ttl = None if forever else self.backend.checkpoint_ttl_s
        expires = time.time() + ttl if ttl else None
        self.recorder.checkpoint(step, "state", state, final=final, kept=keep, expires_at=expires)
        # resume_state always names the newest resumable checkpoint.
        self.recorder.update(resume_state=state)
        self.last_state_step = step
        # A periodic save of weights the step already recorded would only repeat a line; the
        # final one is written again so the index marks it final.
        if forever or self._recorded_sampler != (step, weights):
            self.recorder.checkpoint(step, "sampler", weights, final=final, kept=keep, expires_at=expires)
            self._recorded_sampler = (step, weights)
        if not self.backend.remote:
            prune(self.config.paths.checkpoints_dir, self.config.paths.checkpoints_index, self.t.keep_last_checkpoints)
        return weights

    async def _keep_last(self) -> None:
        """The last checkpoint of a stopped or failed run is kept like a final one: a service
        that lets checkpoints expire (Tinker) is told to keep it, and the index says so. A
        failure is only logged (the run's outcome stands)."""
        if self.backend is None or self.backend.checkpoint_ttl_s is None:
            return
        records = read_index(self.config.paths.checkpoints_index).records
        if not records:
            return
        last = max(r.step for r in records)
        latest = {r.path: r for r in records if r.step == last}
        try:
            await asyncio.wait_for(asyncio.to_thread(self.backend.keep_checkpoints, sorted(latest)), CLOSE_TIMEOUT_S)
        except Exception:  # keeping is best effort: the run's outcome is already decided
            log.warning("could not remove the expiry of the last checkpoint (step %d)", last, exc_info=True)
            return
        for record in latest.values():
            self.recorder.checkpoint(record.step, record.kind, record.path, final=record.final, kept=True)
        log.info("kept the last checkpoint (step %d) without expiry", last)

    async def _finish(self, finished: bool) -> None:
        step = self.recorder.status.step
        if step > self.last_state_step or (finished and self.final_weights is None):
            self.recorder.update(phase=TrainerPhase.SAVING)
            self.final_weights = await asyncio.to_thread(self._save, step, finished, not finished)
        elif not finished:
            await self._keep_last()
        if finished:
            self.recorder.update(phase=TrainerPhase.DONE, final_weights=self.final_weights)
            log.info("training complete: %d steps, final weights %s", step, self.final_weights)
        else:
            self.recorder.update(phase=TrainerPhase.STOPPED, final_weights=self.final_weights)
            log.info("stopped (%s) after step %d; checkpoint %s", self.stop_reason, step, self.final_weights)

    # --- W&B (optional, never required) -----------------------------------------------------
    def _init_wandb(self) -> None:
        settings = self.t.wandb
        if not settings.enabled:
            return
        try:
            # wandb: imported only when the run logs to W&B (seconds of start-up otherwise)
            import wandb

            self.wandb_run = wandb.init(
                project=settings.project,
                entity=settings.entity,
                group=settings.group or self.config.run_id,
                name=f"{self.config.run_id}-trainer",
                job_type="trainer",
                config=self.t.model_dump(mode="json"),
                # wandb 0.31: reinit=True is deprecated; one trainer run per process anyway.
                reinit="finish_previous",
            )
            url = getattr(self.wandb_run, "url", None)
            self.recorder.update(wandb_url=url)
        except Exception:  # W&B is an extra: the run goes on without it
            log.exception("W&B could not start; continuing without it")
            self.wandb_run = None

    def _log_wandb(self, step: int, line: dict[str, Any]) -> None:
        if self.wandb_run is None:
            return
        try:
            self.wandb_run.log({k: v for k, v in line.items() if k not in ("step", "time")}, step=step)
        except Exception:
            log.exception("W&B logging failed; disabling it for this run")
            self.wandb_run = None

    def _close_wandb(self) -> None:
        if self.wandb_run is not None:
            try:
                self.wandb_run.finish()
            except Exception:
                log.exception("closing W&B failed")
