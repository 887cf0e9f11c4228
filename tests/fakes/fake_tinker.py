"""FAKE Tinker: stands in for the paid Tinker service at its SDK boundary (`tinker.ServiceClient`).

Only the calls mcp-rl's Tinker backend makes exist here, with the SDK's shapes: clients come
back as futures with `.result()`, `forward_backward` gets real `tinker.types.Datum`s and returns a
real `tinker.types.ForwardBackwardOutput`, saves return objects with a `tinker://` `.path`.
Everything the backend asked for is recorded in `FakeTinkerWorld` so tests can check it.
The "model" is arithmetic on token ids: deterministic, instant, no network.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Any

from tinker import types


@dataclass
class FakeFuture:
    value: Any

    def result(self, timeout: float | None = None) -> Any:
        return self.value


@dataclass
class FakeSaved:
    path: str


@dataclass
class FakeSequence:
    tokens: list[int]
    logprobs: list[float]
    stop_reason: str


@dataclass
class FakeSampleResponse:
    sequences: list[FakeSequence]


@dataclass
class FakeTinkerWorld:
    """What the fake service was asked to do (shared by every client it hands out)."""

    runs: list[dict[str, Any]] = field(default_factory=list)
    saved_sampler: list[str] = field(default_factory=list)
    saved_state: list[str] = field(default_factory=list)
    loaded_state: list[str] = field(default_factory=list)
    sampling_clients: list[str] = field(default_factory=list)
    forward_backward_calls: list[tuple[list[types.Datum], str]] = field(default_factory=list)
    optim_steps: list[types.AdamParams] = field(default_factory=list)
    samples: list[tuple[list[int], int, Any]] = field(default_factory=list)
    closed: bool = False
    _ids: Any = field(default_factory=lambda: itertools.count(1))


def fake_logprob(token: int) -> float:
    return -0.1 - (token % 7) / 10.0


class FakeSamplingClient:
    def __init__(self, world: FakeTinkerWorld, model_path: str, eos: int) -> None:
        self.world, self.model_path, self.eos = world, model_path, eos

    def sample(self, prompt: types.ModelInput, num_samples: int, sampling_params: types.SamplingParams,
               **_: Any) -> FakeFuture:
        tokens = prompt.to_ints()
        self.world.samples.append((tokens, num_samples, sampling_params))
        seqs = []
        for i in range(num_samples):
            n = max(1, min(sampling_params.max_tokens or 4, 3 + i % 2))
            out = [(tokens[-1] + i + k) % 1000 + 10 for k in range(n - 1)] + [self.eos]
            seqs.append(FakeSequence(tokens=out, logprobs=[fake_logprob(t) for t in out], stop_reason="stop"))
        return FakeFuture(FakeSampleResponse(sequences=seqs))


class FakeTrainingClient:
    def __init__(self, world: FakeTinkerWorld, run_id: str) -> None:
        self.world, self.run_id = world, run_id
        self.model_id = run_id

    def forward_backward(self, data: list[types.Datum], loss_fn: str, loss_fn_config: Any = None) -> FakeFuture:
        self.world.forward_backward_calls.append((list(data), loss_fn))
        outputs = []
        loss = 0.0
        for datum in data:
            targets = datum.loss_fn_inputs["target_tokens"].tolist()
            sampled = datum.loss_fn_inputs["logprobs"].tolist()
            advantages = datum.loss_fn_inputs["advantages"].tolist()
            current = [fake_logprob(int(t)) for t in targets]
            loss -= sum(math.exp(c - s) * a for c, s, a in zip(current, sampled, advantages, strict=True) if a)
            outputs.append({"logprobs": types.TensorData(data=current, dtype="float32")})
        return FakeFuture(types.ForwardBackwardOutput(loss_fn_output_type="ArrayRecord", loss_fn_outputs=outputs,
                                                      metrics={"loss:sum": loss}))

    def optim_step(self, params: types.AdamParams) -> FakeFuture:
        self.world.optim_steps.append(params)
        return FakeFuture(types.OptimStepResponse(metrics={}))

    def save_weights_for_sampler(self, name: str, ttl_seconds: int | None = None) -> FakeFuture:
        path = f"tinker://{self.run_id}/sampler_weights/{name}"
        if path in self.world.saved_sampler:
            raise RuntimeError(f"FAKE Tinker: {path} already exists")
        self.world.saved_sampler.append(path)
        return FakeFuture(FakeSaved(path))

    def save_state(self, name: str, ttl_seconds: int | None = None) -> FakeFuture:
        path = f"tinker://{self.run_id}/weights/{name}"
        self.world.saved_state.append(path)
        return FakeFuture(FakeSaved(path))


class FakeServiceClient:
    """FAKE `tinker.ServiceClient` (records into `world`)."""

    def __init__(self, world: FakeTinkerWorld | None = None, eos: int = 2) -> None:
        self.world = world or FakeTinkerWorld()
        self.eos = eos

    def _new_run(self, **info: Any) -> FakeTrainingClient:
        run_id = f"fake-run-{next(self.world._ids)}"
        self.world.runs.append({"run_id": run_id, **info})
        return FakeTrainingClient(self.world, run_id)

    def create_lora_training_client(self, base_model: str, rank: int = 32, seed: int | None = None,
                                    **_: Any) -> FakeFuture:
        return FakeFuture(self._new_run(base_model=base_model, rank=rank, seed=seed))

    def create_training_client_from_state_with_optimizer(self, path: str, **_: Any) -> FakeFuture:
        if path not in self.world.saved_state:
            raise RuntimeError(f"FAKE Tinker: no saved state {path}")
        self.world.loaded_state.append(path)
        return FakeFuture(self._new_run(from_state=path))

    def create_sampling_client(self, model_path: str | None = None, base_model: str | None = None,
                               **_: Any) -> FakeFuture:
        if model_path is not None and model_path not in self.world.saved_sampler:
            raise RuntimeError(f"FAKE Tinker: no sampler weights {model_path}")
        self.world.sampling_clients.append(model_path or str(base_model))
        return FakeFuture(FakeSamplingClient(self.world, model_path or str(base_model), self.eos))

    def close(self) -> None:
        self.world.closed = True
