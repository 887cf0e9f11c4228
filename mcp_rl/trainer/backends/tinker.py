"""Tinker backend: LoRA training and sampling on Tinker through its SDK.

Every step saves sampler weights (`tinker://.../sampler_weights/step_N`) and switches sampling to
them, so rollouts always come from the latest policy. `save_state` checkpoints (weights and
optimizer) make a run resumable: `load_state` recreates the training client from one.
Credentials come from the environment only (`TINKER_API_KEY`, `TINKER_BASE_URL`).

The SDK is only touched through `service_client`; tests hand in a fake with the same methods
(tests/fakes/fake_tinker.py).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from mcp_rl.trainer.backends.base import (
    AdamParams,
    ForwardBackwardResult,
    SampledSequence,
    SamplingRequest,
    TrainingBackend,
    TrainingExample,
)

if TYPE_CHECKING:
    from mcp_rl.runconfig import RunConfig
    from mcp_rl.settings import Settings

log = logging.getLogger(__name__)

LOSS_FN = "importance_sampling"


def load_tokenizer(name_or_path: str) -> Any:
    """The model's tokenizer: a local folder, or a hub id when hub access is allowed (a Tinker
    model name is a hub id; with HF_HUB_OFFLINE=1 it must already be in the local HF cache)."""
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(name_or_path)
    except OSError as exc:
        raise RuntimeError(
            f"no tokenizer for {name_or_path!r} on this machine ({exc.__class__.__name__}); the trainer never "
            "downloads one at run time: set trainer.tokenizer_path to a local tokenizer folder, or put the "
            "tokenizer in the Hugging Face cache beforehand"
        ) from exc


class TinkerBackend(TrainingBackend):
    def __init__(
        self,
        service_client: Any,
        *,
        base_model: str,
        lora_rank: int,
        tokenizer: Any,
        seed: int | None = None,
    ) -> None:
        from tinker import types

        self._types = types
        self.service = service_client
        self.base_model = base_model
        self.model_name = base_model
        self.tokenizer = tokenizer
        self.lora_rank = lora_rank
        self.training = service_client.create_lora_training_client(
            base_model=base_model, rank=lora_rank, seed=seed
        ).result()
        self.sampler_path = self._save_sampler("step_000000")
        self.sampling = self.service.create_sampling_client(model_path=self.sampler_path).result()

    @classmethod
    def from_settings(cls, config: RunConfig, settings: Settings) -> TinkerBackend:
        import tinker

        if settings.tinker_api_key is None:
            raise RuntimeError("the tinker backend needs TINKER_API_KEY in the trainer's environment")
        t = config.trainer
        service = tinker.ServiceClient(
            api_key=settings.tinker_api_key.get_secret_value(),
            base_url=settings.tinker_base_url,
        )
        tokenizer = load_tokenizer(t.tokenizer_path or t.base_model)
        return cls(service, base_model=t.base_model, lora_rank=t.lora_rank, tokenizer=tokenizer, seed=t.seed)

    # --- sampling ---------------------------------------------------------------------------
    def sample(self, request: SamplingRequest) -> list[SampledSequence]:
        types = self._types
        stop: list[str] | list[int] | None = None
        if request.stop:
            stop = list(request.stop)
        elif request.stop_token_ids:
            stop = list(request.stop_token_ids)
        params = types.SamplingParams(
            max_tokens=request.max_tokens,
            temperature=request.temperature,
            top_p=request.top_p,
            seed=request.seed,
            stop=stop,
        )
        response = self.sampling.sample(
            prompt=types.ModelInput.from_ints(list(request.prompt_tokens)),
            num_samples=request.n,
            sampling_params=params,
        ).result()
        out = []
        for seq in response.sequences:
            tokens = list(seq.tokens)
            logprobs = list(seq.logprobs or [])
            if len(logprobs) != len(tokens):
                raise RuntimeError("Tinker returned a sample without one logprob per token")
            out.append(SampledSequence(tokens=tokens, logprobs=[float(x) for x in logprobs],
                                       finish_reason="length" if seq.stop_reason == "length" else "stop"))
        return out

    # --- training ---------------------------------------------------------------------------
    def datum(self, example: TrainingExample) -> Any:
        types = self._types
        # Tinker's importance-sampling loss needs the sampler's logprobs; without them (an
        # OpenAI-type rollout server) the trainer's own make the ratio 1: plain REINFORCE.
        logprobs = example.sampling_logprobs
        if logprobs is None:
            logprobs = [0.0] * len(example.target_tokens)
        return types.Datum(
            model_input=types.ModelInput.from_ints(list(example.input_tokens)),
            loss_fn_inputs={
                "target_tokens": list(example.target_tokens),
                "logprobs": [float(x) for x in logprobs],
                "advantages": [float(a) for a in example.advantages],
            },
        )

    def forward_backward(self, examples: list[TrainingExample]) -> ForwardBackwardResult:
        if any(e.sampling_logprobs is None for e in examples):
            log.warning("some sequences carry no sampler logprobs; their importance weights use 0.0")
        data = [self.datum(e) for e in examples]
        output = self.training.forward_backward(data, LOSS_FN).result()
        training_logprobs = []
        for item in output.loss_fn_outputs:
            lps = item.get("logprobs")
            training_logprobs.append([float(x) for x in lps.tolist()] if lps is not None else [])
        metrics = dict(output.metrics or {})
        loss = float(metrics.get("loss:sum", metrics.get("loss", 0.0)))
        extra = {f"tinker/{k}": float(v) for k, v in metrics.items() if isinstance(v, int | float)}
        return ForwardBackwardResult(loss=loss, training_logprobs=training_logprobs, extra=extra)

    def optim_step(self, params: AdamParams) -> None:
        self.training.optim_step(
            self._types.AdamParams(learning_rate=params.learning_rate, beta1=params.beta1,
                                   beta2=params.beta2, eps=params.eps)
        ).result()

    def update_sampler(self, step: int) -> str | None:
        from mcp_rl.trainer.loop import step_name

        self.sampler_path = self._save_sampler(step_name(step))
        self.sampling = self.service.create_sampling_client(model_path=self.sampler_path).result()
        return self.sampler_path

    def _save_sampler(self, name: str) -> str:
        return str(self.training.save_weights_for_sampler(name).result().path)

    # --- checkpoints ------------------------------------------------------------------------
    def save_sampler_weights(self, name: str) -> str:
        # The weights of the latest step are already saved for the sampler; saving them again
        # under the same name would be refused, so the saved path is reported as is.
        if self.sampler_path.rstrip("/").endswith("/" + name):
            return self.sampler_path
        return self._save_sampler(name)

    def save_state(self, name: str) -> str:
        return str(self.training.save_state(name).result().path)

    def load_state(self, path: str) -> None:
        self.training = self.service.create_training_client_from_state_with_optimizer(path).result()
        self.sampler_path = self._save_sampler("resumed")
        self.sampling = self.service.create_sampling_client(model_path=self.sampler_path).result()

    def close(self) -> None:
        close = getattr(self.service, "close", None)
        if callable(close):
            close()
