"""What the trainer needs from a training service, whichever it is (Tinker or local torch).

The interface is synchronous on purpose: the local backend is plain blocking torch code and the
Tinker SDK's futures have a blocking `.result()`. The trainer calls it from a worker thread, so
its event loop (heartbeats, HTTP) never blocks. Implementations serialise access themselves.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

FinishReason = Literal["stop", "length"]
# How a run ended, as a remote service's session records it.
RunOutcome = Literal["success", "errored", "interrupted"]


WaitCallback = Callable[[float], None]


@dataclass(frozen=True)
class SampledSequence:
    """One completion: its new tokens (a stop token included) and their logprobs."""

    tokens: list[int]
    logprobs: list[float]
    finish_reason: FinishReason


@dataclass(frozen=True)
class SamplingRequest:
    prompt_tokens: list[int]
    n: int = 1
    max_tokens: int = 16
    temperature: float = 1.0
    top_p: float = 1.0
    stop: list[str] = field(default_factory=list)
    stop_token_ids: list[int] = field(default_factory=list)
    seed: int | None = None


@dataclass(frozen=True)
class TrainingExample:
    """One sequence ready for the loss: inputs and targets shifted by one, per-target weights.

    `trained[t]` says whether target `t` is a completion token (prompt targets are not trained);
    `advantages[t]` weights target `t` (0 where not trained);
    `sampling_logprobs[t]` is what the sampler gave target `t` (None: unknown, train on-policy).
    """

    input_tokens: list[int]
    target_tokens: list[int]
    advantages: list[float]
    sampling_logprobs: list[float] | None
    trained: list[bool]

    def __post_init__(self) -> None:
        n = len(self.target_tokens)
        if not (len(self.input_tokens) == len(self.advantages) == len(self.trained) == n):
            raise ValueError("input_tokens, target_tokens, advantages and trained must have equal lengths")
        if self.sampling_logprobs is not None and len(self.sampling_logprobs) != n:
            raise ValueError("sampling_logprobs must have one entry per target token")


@dataclass(frozen=True)
class ForwardBackwardResult:
    loss: float
    # Logprob of every target token under the weights that computed the gradient.
    training_logprobs: list[list[float]]
    extra: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class AdamParams:
    learning_rate: float
    beta1: float = 0.9
    beta2: float = 0.95
    eps: float = 1e-8


class Sampler(ABC):
    """Token-level sampling from the current policy (all the inference server needs)."""

    #: the Hugging Face tokenizer matching the model (chat template, decode)
    tokenizer: Any
    #: what the inference server reports as `model`
    model_name: str
    #: a remote service samples many requests at once; a local model one at a time
    remote: bool = False

    @abstractmethod
    def sample(self, request: SamplingRequest) -> list[SampledSequence]:
        """`request.n` completions of `request.prompt_tokens` from the current weights."""

    def top_logprobs(self, prompt: list[int], completion: list[int], k: int) -> list[list[tuple[int, float]]]:
        """For each token of `completion` after `prompt`: the `k` most likely tokens at that
        position under the current weights (the model's own distribution, temperature 1), each
        with its logprob, most likely first. Backends that cannot say raise NotImplementedError
        (the inference server then refuses top_logprobs with a 400)."""
        raise NotImplementedError("this backend does not report top logprobs")


class TrainingBackend(Sampler):
    """A policy that can be sampled, trained with an importance-sampling loss and saved."""

    @abstractmethod
    def forward_backward(self, examples: list[TrainingExample]) -> ForwardBackwardResult:
        """Accumulate gradients of the importance-sampling policy-gradient loss:
        `-sum_t exp(logp_t - sampling_logp_t) * advantage_t` over all examples."""

    @abstractmethod
    def optim_step(self, params: AdamParams) -> None:
        """Apply one Adam step with the accumulated gradients and clear them."""

    @abstractmethod
    def update_sampler(self, step: int) -> str | None:
        """Make sampling follow the weights after `step`; returns a saved sampler path if the
        backend had to save one to do so (Tinker), else None (local: sampling is live)."""

    @abstractmethod
    def save_sampler_weights(self, name: str) -> str:
        """Save weights usable for inference; returns a local folder or a tinker:// path."""

    @abstractmethod
    def save_state(self, name: str) -> str:
        """Save weights and optimizer state so a run can resume; returns where."""

    @abstractmethod
    def load_state(self, path: str) -> None:
        """Restore weights and optimizer state saved by `save_state`."""

    def prepare(self, on_wait: WaitCallback | None = None) -> None:
        """Finish setting up before the first sample: a remote backend creates its model here
        unless `load_state` already did (`on_wait(seconds)` reports a wait in the service's
        queue). Local models are ready once built."""

    def train_step(
        self, examples: list[TrainingExample], params: AdamParams, step: int
    ) -> tuple[ForwardBackwardResult, str | None]:
        """`forward_backward`, `optim_step` and `update_sampler(step)` in that order. A remote
        backend submits all three before waiting on any (one clock cycle instead of three)."""
        result = self.forward_backward(examples)
        self.optim_step(params)
        return result, self.update_sampler(step)

    #: seconds an intermediate checkpoint lives on the service (None: never expires, local)
    checkpoint_ttl_s: int | None = None

    def keep_checkpoints(self, paths: list[str]) -> None:
        """Remove any expiry from saved checkpoints: the last checkpoint of a stopped or failed
        run is kept like a final one. Local checkpoints never expire: nothing to do."""

    def save_checkpoint(self, name: str, *, final: bool) -> tuple[str, str]:
        """`save_state(name)` then `save_sampler_weights(name)`: (state path, weights path).
        A remote backend may let intermediate (not `final`) checkpoints expire."""
        return self.save_state(name), self.save_sampler_weights(name)

    def close(self, status: RunOutcome = "success", detail: str | None = None) -> None:
        """Release resources (sessions, threads); `status` is how the run ended."""
