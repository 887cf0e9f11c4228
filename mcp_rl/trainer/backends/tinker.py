"""Tinker backend: LoRA training and sampling on Tinker through its SDK.

How a run uses Tinker (each point checked against the installed tinker 0.38):
- The model is created once: a fresh LoRA client, or, on resume, straight from the saved state
  with its optimizer (`create_training_client_from_state_with_optimizer`). Tinker may queue the
  creation; the wait has a deadline and is reported to the trainer's status.
- A training step submits forward_backward, optim_step and the per-step sampler weights back
  to back and only then waits: the three land in one of Tinker's clock cycles.
- Per-step sampler weights are ephemeral (`save_weights_and_get_sampling_client`); named,
  persistent checkpoints are made only at the run's checkpoint interval and expire after
  `checkpoint_ttl_s`; the final checkpoint never expires.
- Tinker's `importance_sampling` loss weights each token by `exp(logp - logprobs)`. Sequences
  the sampler gave no logprobs for get the current policy's own (one forward pass), so their
  ratio is 1: the same objective as the local backend.
- The session is finished with the run's true outcome; a failed finish is only a warning.
Credentials come from the environment only (`TINKER_API_KEY`, `TINKER_BASE_URL`).
"""

from __future__ import annotations

import concurrent.futures
import logging
import time
import warnings
from typing import TYPE_CHECKING, Any, cast

from mcp_rl.costs.meter import TokenMeter
from mcp_rl.costs.tinker_billing import RUN_METADATA_KEY
from mcp_rl.trainer.backends.base import (
    AdamParams,
    ForwardBackwardResult,
    RunOutcome,
    SampledSequence,
    SamplingRequest,
    TrainingBackend,
    TrainingExample,
    WaitCallback,
)

if TYPE_CHECKING:
    from mcp_rl.runconfig import RunConfig
    from mcp_rl.settings import Settings

log = logging.getLogger(__name__)

LOSS_FN = "importance_sampling"
# Only its per-token logprobs are used: the current policy's logprobs of the targets.
LOGPROBS_LOSS_FN = "cross_entropy"
# How often a queued model creation reports its wait.
WAIT_REPORT_S = 5.0
CLOSE_TIMEOUT_S = 20.0


def load_tokenizer(path: str) -> Any:
    """A tokenizer from a local folder (trainer.tokenizer_path or MCP_RL_TOKENIZER_PATH)."""
    # transformers is heavy: only a local tokenizer folder needs it
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(path)
    except OSError as exc:
        raise RuntimeError(
            f"no tokenizer in {path!r} ({exc.__class__.__name__}): point MCP_RL_TOKENIZER_PATH (or "
            "trainer.tokenizer_path) at a folder with the model's tokenizer files (tokenizer.json, "
            "tokenizer_config.json), or unset it to fetch the tokenizer from the Hugging Face hub"
        ) from exc


def fetch_hint(model: str) -> str:
    """How to make `model`'s tokenizer available on this machine."""
    return (
        f"fetch it once where huggingface.co is reachable with `hf download {model} --include "
        f"'tokenizer*' '*.json'` (it lands in the Hugging Face cache), or download its tokenizer files "
        f"into a folder and set MCP_RL_TOKENIZER_PATH to that folder"
    )


def tokenizer_error(model: str, exc: BaseException) -> RuntimeError:
    """A clear error for a tokenizer that could not be loaded from the hub or its cache."""
    # huggingface_hub is heavy; doctor imports this module for fetch_hint
    from huggingface_hub import constants

    reason = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
    offline = (
        " HF_HUB_OFFLINE is set in this environment, so the hub is not asked: unset it to let the "
        "first run fetch the tokenizer, or"
        if constants.HF_HUB_OFFLINE
        else " Check that this machine reaches huggingface.co (the first run fetches the tokenizer), or"
    )
    return RuntimeError(f"could not load the tokenizer of {model!r} ({reason}).{offline} {fetch_hint(model)}.")


def sdk_version() -> tuple[int, ...]:
    """The version of the tinker SDK this interpreter imports (a run's trainer may get an older
    one on its path: mcp_rl.supervisor.tinker_sdk)."""
    from importlib.metadata import version  # only the Tinker backend asks

    return tuple(int(part) for part in version("tinker").split(".")[:3] if part.isdigit())


# Since 0.26 the SDK asserts sample_sequence_ids, resumes in one load_weights call with the
# session id, and sets checkpoint TTLs through REST: self-hosted servers (SkyRL, TuFT) speak 0.25.
SELF_HOSTED_BEFORE = (0, 26)


def _wait(future: Any, timeout: float | None = None) -> Any:
    """The result of an SDK future, waited for in this (worker) thread. SDK 0.38 answers with
    futures that wrap a concurrent future (`.future()`); 0.25 with `APIFuture.result(timeout)`,
    and creates training clients without a future at all."""
    if hasattr(future, "future"):
        return future.future().result(timeout)
    if hasattr(future, "result") and callable(future.result):
        return future.result(timeout)
    return future


class TinkerBackend(TrainingBackend):
    remote = True

    def __init__(
        self,
        service_client: Any,
        *,
        base_model: str,
        lora_rank: int,
        tokenizer: Any = None,
        seed: int | None = None,
        checkpoint_ttl_s: int | None = None,
        create_timeout_s: float = 600.0,
    ) -> None:
        """Nothing is created on Tinker yet: `prepare()` (after an optional `load_state`) does it,
        so a resumed run never creates a model it throws away. Without `tokenizer`, the training
        client's own is used (fetched from the Hugging Face hub on first use)."""
        # the Tinker SDK is heavy; doctor imports this module for fetch_hint
        from tinker import types

        self._types = types
        self.service = service_client
        self.base_model = base_model
        self.model_name = base_model
        self.tokenizer = tokenizer
        self.lora_rank = lora_rank
        self.seed = seed
        # The 0.25 dialect (self-hosted servers): no checkpoint TTL route, no session finish.
        self.self_hosted = sdk_version() < SELF_HOSTED_BEFORE
        self.checkpoint_ttl_s = None if self.self_hosted else checkpoint_ttl_s
        self.create_timeout_s = create_timeout_s
        self.training: Any = None
        self.sampling: Any = None
        self._resume_from: str | None = None
        self._closed = False
        self.rest_client: Any = None
        # What Tinker bills, counted at each SDK call (mcp_rl.costs): the trainer takes it per step.
        self.meter = TokenMeter()

    @classmethod
    def from_settings(cls, config: RunConfig, settings: Settings) -> TinkerBackend:
        # the Tinker SDK is heavy; doctor imports this module for fetch_hint
        import tinker

        if settings.tinker_api_key is None:
            raise RuntimeError("the tinker backend needs TINKER_API_KEY in the trainer's environment")
        t = config.trainer
        path = t.tokenizer_path or (str(settings.tokenizer_path) if settings.tokenizer_path else None)
        tokenizer = load_tokenizer(path) if path else None
        service = tinker.ServiceClient(
            # Tinker's billing API attributes usage to sessions by this (mcp_rl.costs.tinker_billing).
            user_metadata={RUN_METADATA_KEY: config.run_id},
            api_key=settings.tinker_api_key.get_secret_value(),
            base_url=settings.tinker_base_url,
        )
        backend = cls(
            service,
            base_model=t.base_model,
            lora_rank=t.lora_rank,
            tokenizer=tokenizer,
            seed=t.seed,
            checkpoint_ttl_s=settings.tinker_checkpoint_ttl_s,
            create_timeout_s=settings.tinker_create_timeout_s,
        )
        if not backend.self_hosted:  # SDK 0.25's RestClient is made by its service client only
            backend.rest_client = tinker.RestClient(
                base_url=settings.tinker_base_url, api_key=settings.tinker_api_key.get_secret_value()
            )
        return backend

    # --- setting up -------------------------------------------------------------------------
    def load_state(self, path: str) -> None:
        if self.training is None:
            # Resume is the creation itself: prepare() loads the state instead of a fresh model.
            self._resume_from = path
            return
        self.training = self._await_model(
            self.service.create_training_client_from_state_with_optimizer(path), f"loading {path}", None
        )
        self._new_sampler()

    def prepare(self, on_wait: WaitCallback | None = None) -> None:
        if self.training is None:
            if self._resume_from is not None:
                future = self.service.create_training_client_from_state_with_optimizer(self._resume_from)
                what = f"loading {self._resume_from}"
            else:
                future = self.service.create_lora_training_client(
                    base_model=self.base_model, rank=self.lora_rank, seed=self.seed
                )
                what = f"a LoRA model of {self.base_model}"
            self.training = self._await_model(future, what, on_wait)
        if self.tokenizer is None:
            try:
                self.tokenizer = self.training.get_tokenizer()
            except Exception as exc:  # any failure gets the same advice
                raise tokenizer_error(self.base_model, exc) from exc
        if self.sampling is None:
            self._new_sampler()

    def _await_model(self, future: Any, what: str, on_wait: WaitCallback | None) -> Any:
        """The training client once Tinker created it, reporting the wait every few seconds;
        past `create_timeout_s` the request is abandoned with a clear error."""
        started = time.monotonic()
        deadline = started + self.create_timeout_s
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                future.future().cancel()
                raise RuntimeError(
                    f"Tinker did not create {what} within {self.create_timeout_s:.0f} s (its queue may be "
                    "busy): start the run again later, or allow a longer wait with "
                    "MCP_RL_TINKER_CREATE_TIMEOUT (seconds)"
                )
            try:
                return _wait(future, min(WAIT_REPORT_S, remaining))
            except concurrent.futures.TimeoutError:
                if on_wait is not None:
                    on_wait(time.monotonic() - started)

    def _new_sampler(self) -> None:
        """Sampling follows the current weights through ephemeral sampler weights."""
        self.sampling = _wait(self.training.save_weights_and_get_sampling_client())

    # --- sampling ---------------------------------------------------------------------------
    def sample(self, request: SamplingRequest) -> list[SampledSequence]:
        types = self._types
        stop = self._stops(request)
        params = types.SamplingParams(
            max_tokens=request.max_tokens,
            temperature=request.temperature,
            top_p=request.top_p,
            seed=request.seed,
            stop=stop,
        )
        response = _wait(
            self.sampling.sample(
                prompt=types.ModelInput.from_ints(list(request.prompt_tokens)),
                num_samples=request.n,
                sampling_params=params,
            )
        )
        out = []
        self.meter.add(prefill=len(request.prompt_tokens), sampled=sum(len(seq.tokens) for seq in response.sequences))
        for seq in response.sequences:
            tokens = list(seq.tokens)
            logprobs = list(seq.logprobs or [])
            if len(logprobs) != len(tokens):
                raise RuntimeError("Tinker returned a sample without one logprob per token")
            out.append(
                SampledSequence(
                    tokens=tokens,
                    logprobs=[float(x) for x in logprobs],
                    finish_reason="length" if seq.stop_reason == "length" else "stop",
                )
            )
        return out

    def _stops(self, request: SamplingRequest) -> list[str] | list[int] | None:
        """Tinker's `stop`: None keeps its implicit EOS stop, but a given list replaces it, so the
        end-of-sequence token (as text with stop strings, as an id with stop ids) is added back:
        stop strings must not make a sample run on past EOS to max_tokens. A self-hosted server
        has no implicit stop (SkyRL 0.4.0 stops only at the stop tokens it is given: measured, its
        answers ran on past `<|im_end|>` to max_tokens), so it is always given EOS."""
        eos_id = getattr(self.tokenizer, "eos_token_id", None)
        eos_text = getattr(self.tokenizer, "eos_token", None)
        if request.stop:
            texts = list(request.stop)
            return texts + [eos_text] if isinstance(eos_text, str) and eos_text and eos_text not in texts else texts
        if request.stop_token_ids:
            ids = list(request.stop_token_ids)
            return ids + [eos_id] if isinstance(eos_id, int) and eos_id not in ids else ids
        return [eos_id] if self.self_hosted and isinstance(eos_id, int) else None

    # --- training ---------------------------------------------------------------------------
    def datum(self, example: TrainingExample, logprobs: list[float] | None = None) -> Any:
        """The importance-sampling datum of `example`; `logprobs` stand in for missing sampler
        logprobs (the current policy's, so the ratio is 1)."""
        logprobs = example.sampling_logprobs if example.sampling_logprobs is not None else logprobs
        if logprobs is None:
            raise ValueError("an example without sampler logprobs needs the current policy's logprobs")
        # Raw lists: Datum coerces each to TensorData with the loss's wire dtype (int64/float32).
        inputs: dict[str, Any] = {
            "target_tokens": list(example.target_tokens),
            "logprobs": [float(x) for x in logprobs],
            "advantages": [float(a) for a in example.advantages],
        }
        return self._types.Datum(
            model_input=self._types.ModelInput.from_ints(list(example.input_tokens)), loss_fn_inputs=inputs
        )

    def _datums(self, examples: list[TrainingExample]) -> list[Any]:
        """Datums for a batch; sequences without sampler logprobs get the current policy's own
        from one forward pass (same weights as the forward_backward that follows)."""
        if not examples:
            raise ValueError("no examples to train on")
        missing = [i for i, e in enumerate(examples) if e.sampling_logprobs is None]
        current: dict[int, list[float]] = {}
        if missing:
            probe = [
                self._types.Datum(
                    model_input=self._types.ModelInput.from_ints(list(examples[i].input_tokens)),
                    loss_fn_inputs=cast(
                        dict[str, Any],
                        {
                            "target_tokens": list(examples[i].target_tokens),
                            "weights": [0.0] * len(examples[i].target_tokens),
                        },
                    ),
                )
                for i in missing
            ]
            output = _wait(self.training.forward(probe, LOGPROBS_LOSS_FN))
            self.meter.add(prefill=sum(len(examples[i].input_tokens) for i in missing))
            for i, item in zip(missing, output.loss_fn_outputs, strict=True):
                current[i] = [float(x) for x in item["logprobs"].tolist()]
        return [self.datum(e, current.get(i)) for i, e in enumerate(examples)]

    def _adam(self, params: AdamParams) -> Any:
        return self._types.AdamParams(
            learning_rate=params.learning_rate, beta1=params.beta1, beta2=params.beta2, eps=params.eps
        )

    @staticmethod
    def _result(output: Any) -> ForwardBackwardResult:
        training_logprobs = []
        for item in output.loss_fn_outputs:
            lps = item.get("logprobs")
            training_logprobs.append([float(x) for x in lps.tolist()] if lps is not None else [])
        metrics = dict(output.metrics or {})
        loss = metrics.get("loss:sum", metrics.get("loss"))
        if loss is None:
            # Some Tinker-compatible servers report no loss metric, only per-token losses.
            loss = sum(
                float(x)
                for item in output.loss_fn_outputs
                if item.get("elementwise_loss") is not None
                for x in item["elementwise_loss"].tolist()
            )
        extra = {f"tinker/{k}": float(v) for k, v in metrics.items() if isinstance(v, int | float)}
        return ForwardBackwardResult(loss=float(loss), training_logprobs=training_logprobs, extra=extra)

    def forward_backward(self, examples: list[TrainingExample]) -> ForwardBackwardResult:
        result = self._result(_wait(self.training.forward_backward(self._datums(examples), LOSS_FN)))
        self.meter.add(trained=sum(len(e.input_tokens) for e in examples))
        return result

    def optim_step(self, params: AdamParams) -> None:
        _wait(self.training.optim_step(self._adam(params)))

    def update_sampler(self, step: int) -> str | None:
        self._new_sampler()
        return None

    def train_step(
        self, examples: list[TrainingExample], params: AdamParams, step: int
    ) -> tuple[ForwardBackwardResult, str | None]:
        data = self._datums(examples)
        # Submitted back to back, awaited after: one clock cycle for the whole step.
        fwd_bwd = self.training.forward_backward(data, LOSS_FN)
        optim = self.training.optim_step(self._adam(params))
        sampler = self.training.save_weights_and_get_sampling_client()
        result = self._result(_wait(fwd_bwd))
        self.meter.add(trained=sum(len(e.input_tokens) for e in examples))
        _wait(optim)
        self.sampling = _wait(sampler)
        return result, None

    # --- checkpoints ------------------------------------------------------------------------
    def save_sampler_weights(self, name: str) -> str:
        return str(_wait(self.training.save_weights_for_sampler(name)).path)

    def save_state(self, name: str) -> str:
        return str(_wait(self.training.save_state(name)).path)

    def save_checkpoint(self, name: str, *, final: bool) -> tuple[str, str]:
        ttl = None if final else self.checkpoint_ttl_s
        state = self.training.save_state(name, ttl_seconds=ttl)
        weights = self.training.save_weights_for_sampler(name, ttl_seconds=ttl)
        return str(_wait(state).path), str(_wait(weights).path)

    def _rest(self) -> Any:
        """The REST client of this backend's service (given, or the service's own)."""
        if self.rest_client is None:
            with warnings.catch_warnings():
                # tinker 0.38 deprecates it for RestClient(base_url, api_key); a test-made
                # service client carries no settings to build one from.
                warnings.simplefilter("ignore", FutureWarning)
                self.rest_client = self.service.create_rest_client()
        return self.rest_client

    def keep_checkpoints(self, paths: list[str]) -> None:
        """Remove the TTL of saved checkpoints through the REST client (what `tinker checkpoint
        set-ttl --remove` does)."""
        paths = [p for p in paths if p.startswith("tinker://")]
        if not paths:
            return
        if self.self_hosted:
            # Saved without a TTL: a self-hosted server keeps them until deleted.
            log.info("tinker SDK %s (self-hosted dialect): checkpoints carry no TTL; nothing to keep", sdk_version())
            return
        rest = self._rest()
        futures = [rest.set_checkpoint_ttl_from_tinker_path(p, None) for p in paths]
        for future in futures:
            future.result(timeout=CLOSE_TIMEOUT_S)

    def close(self, status: RunOutcome = "success", detail: str | None = None) -> None:
        """Finish the Tinker session with the run's outcome. Call it from a worker thread (the
        SDK refuses a blocking wait on an event loop); a failure is logged, never raised."""
        if self._closed:
            return
        self._closed = True
        if not hasattr(self.service, "close"):
            # SDK 0.25 has no session finish (nor do the servers that speak it): the session
            # ends when its heartbeats stop.
            log.info("tinker SDK %s has no session finish; the run's outcome is %s", sdk_version(), status)
            return
        try:
            _wait(self.service.close(status, detail), CLOSE_TIMEOUT_S)
        except Exception as exc:
            log.warning(
                "Tinker did not record the end of the session (%s: %s); the run's outcome stands",
                type(exc).__name__,
                exc,
            )
