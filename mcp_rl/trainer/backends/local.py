"""Local backend: a causal LM in torch (CPU, or a GPU when present) with a LoRA adapter.

Sampling and training share one model object behind one lock, so the inference server always
samples the current policy and never sees weights halfway through an optimizer step.
Checkpoints are folders in the run directory, written to a temporary name and renamed.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import time
from pathlib import Path
from typing import Any

from mcp_rl.trainer.backends.base import (
    AdamParams,
    ForwardBackwardResult,
    SampledSequence,
    SamplingRequest,
    TrainingBackend,
    TrainingExample,
)
from mcp_rl.trainer.backends.prompt_cache import PromptCache

log = logging.getLogger(__name__)

LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
STATE_FILE = "trainer_state.pt"
ADAPTER_DIR = "adapter"


def configure_torch_threads() -> int:
    """Half the cores (at least one), or MCP_RL_TORCH_THREADS.

    A run shares the machine with its environment process and the Atropos API, and often with
    other runs. torch's default of one thread per core then oversubscribes the CPU, and its
    OpenMP threads wait on each other while descheduled: steps became 10x slower in measurements
    on a shared 2-core machine.
    """
    import torch

    wanted = int(os.environ.get("MCP_RL_TORCH_THREADS", "0") or 0) or max(1, (os.cpu_count() or 1) // 2)
    torch.set_num_threads(wanted)
    return wanted


class LocalBackend(TrainingBackend):
    """`train=False` serves the base model as it is (no adapter, no optimizer)."""

    def __init__(
        self,
        model_dir: Path,
        *,
        lora_rank: int = 8,
        lora_alpha: float | None = None,
        seed: int = 0,
        train: bool = True,
        device: str | None = None,
        checkpoints_dir: Path | None = None,
    ) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self._torch = torch
        self._lock = threading.Lock()
        self.model_dir = Path(model_dir)
        self.checkpoints_dir = Path(checkpoints_dir) if checkpoints_dir is not None else None
        self.model_name = self.model_dir.name
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        self.tokenizer = AutoTokenizer.from_pretrained(str(self.model_dir))
        model = AutoModelForCausalLM.from_pretrained(str(self.model_dir), dtype=torch.float32)
        model.to(self.device)
        model.eval()  # no dropout in sampling or training: sampler and trainer logprobs must agree
        self.trainable = train
        if train:
            from peft import LoraConfig, get_peft_model

            targets = [t for t in LORA_TARGETS if any(n.endswith(t) for n, _ in model.named_modules())]
            config = LoraConfig(
                r=lora_rank,
                lora_alpha=lora_alpha if lora_alpha is not None else 2 * lora_rank,
                lora_dropout=0.0,
                target_modules=targets,
                bias="none",
                task_type="CAUSAL_LM",
            )
            torch.manual_seed(seed)
            model = get_peft_model(model, config)
        self.model = model
        # The transformer body without the LM head (LoRA layers live inside it).
        self._decoder = (model.get_base_model() if train else model).model
        self._generator = torch.Generator(device="cpu").manual_seed(seed)
        self._optimizer: Any = None
        self.eos_ids = self._eos_ids()
        # Bumped whenever the weights change: cached prompts are only valid for one version.
        self._weights_version = 0
        self.prompt_cache = PromptCache()

    # --- sampling ---------------------------------------------------------------------------
    def _eos_ids(self) -> list[int]:
        ids = set()
        for value in (self.tokenizer.eos_token_id, getattr(self.model.config, "eos_token_id", None)):
            if isinstance(value, int):
                ids.add(value)
            elif isinstance(value, list):
                ids.update(v for v in value if isinstance(v, int))
        return sorted(ids)

    def sample(self, request: SamplingRequest) -> list[SampledSequence]:
        with self._lock:
            return self._sample_locked(request)

    def _sample_locked(self, request: SamplingRequest) -> list[SampledSequence]:
        torch = self._torch
        if not request.prompt_tokens:
            raise ValueError("empty prompt")
        n = max(1, request.n)
        stop_ids = set(self.eos_ids) | set(request.stop_token_ids)
        generator = self._generator
        if request.seed is not None:
            generator = torch.Generator(device="cpu").manual_seed(request.seed)
        tokens: list[list[int]] = [[] for _ in range(n)]
        logprobs: list[list[float]] = [[] for _ in range(n)]
        reasons: list[str | None] = [None] * n
        with torch.no_grad():
            # Every sample shares the prompt: run it once and copy the cache n ways. A prompt that
            # extends a recent one (the next turn of an episode) only computes its new tokens.
            reused, past = self.prompt_cache.lookup(request.prompt_tokens, self._weights_version)
            prompt = torch.tensor([request.prompt_tokens], device=self.device)
            out = self.model(input_ids=prompt[:, reused:], past_key_values=past, use_cache=True, logits_to_keep=1)
            past = out.past_key_values
            self.prompt_cache.store(request.prompt_tokens, past, self._weights_version)
            if n > 1 and hasattr(past, "batch_repeat_interleave"):
                past.batch_repeat_interleave(n)
                logits = out.logits[:, -1, :].float().expand(n, -1)
            elif n > 1:
                out = self.model(input_ids=prompt.expand(n, -1), use_cache=True, logits_to_keep=1)
                past = out.past_key_values
                logits = out.logits[:, -1, :].float()
            else:
                logits = out.logits[:, -1, :].float()
            for _ in range(max(0, request.max_tokens)):
                logp = torch.log_softmax(logits, dim=-1)
                next_ids = self._pick(logits, request, generator)
                chosen = logp.gather(1, next_ids[:, None])[:, 0]
                for i in range(n):
                    if reasons[i] is not None:
                        continue
                    tok = int(next_ids[i])
                    tokens[i].append(tok)
                    logprobs[i].append(float(chosen[i]))
                    if tok in stop_ids or (request.stop and self._hits_stop(tokens[i], request.stop)):
                        reasons[i] = "stop"
                if all(r is not None for r in reasons):
                    break
                out = self.model(input_ids=next_ids[:, None].to(self.device), past_key_values=past, use_cache=True)
                past = out.past_key_values
                logits = out.logits[:, -1, :].float()
        return [
            SampledSequence(tokens=t, logprobs=lp, finish_reason=r or "length")  # type: ignore[arg-type]
            for t, lp, r in zip(tokens, logprobs, reasons, strict=True)
        ]

    def _pick(self, logits: Any, request: SamplingRequest, generator: Any) -> Any:
        torch = self._torch
        if request.temperature <= 0:
            return torch.argmax(logits, dim=-1)
        probs = torch.softmax(logits / request.temperature, dim=-1)
        if request.top_p < 1.0:
            sorted_p, order = torch.sort(probs, descending=True, dim=-1)
            keep = torch.cumsum(sorted_p, dim=-1) - sorted_p < request.top_p
            sorted_p = sorted_p * keep
            probs = torch.zeros_like(probs).scatter(1, order, sorted_p)
        return torch.multinomial(probs.cpu(), 1, generator=generator)[:, 0].to(logits.device)

    def _hits_stop(self, tokens: list[int], stop: list[str]) -> bool:
        tail = self.tokenizer.decode(tokens[-8:], skip_special_tokens=False)
        return any(s and s in tail for s in stop)

    # --- training ---------------------------------------------------------------------------
    def _params(self) -> list[Any]:
        return [p for p in self.model.parameters() if p.requires_grad]

    def forward_backward(self, examples: list[TrainingExample]) -> ForwardBackwardResult:
        if not self.trainable:
            raise RuntimeError("this backend was built for serving only")
        if not examples:
            raise ValueError("no examples to train on")
        with self._lock:
            return self._forward_backward_locked(examples)

    def _forward_backward_locked(self, examples: list[TrainingExample]) -> ForwardBackwardResult:
        """Sequences of one group share their prompt: it is run once per group and its KV cache
        (which keeps the autograd graph) is shared by the group's completions. With short answers
        to a long prompt this is most of the compute saved."""
        shared: dict[tuple[int, ...], list[int]] = {}
        for i, e in enumerate(examples):
            first = e.trained.index(True) if any(e.trained) else len(e.trained)
            shared.setdefault(tuple(e.input_tokens[:first]), []).append(i)
        total = 0.0
        training_logprobs: list[list[float]] = [[0.0] * len(e.input_tokens) for e in examples]
        for prefix, members in shared.items():
            loss, picked = self._group_loss(prefix, [examples[i] for i in members])
            loss.backward()
            total += float(loss.detach())
            for i, values in zip(members, picked, strict=True):
                training_logprobs[i] = values
        return ForwardBackwardResult(loss=total, training_logprobs=training_logprobs)

    def _group_loss(self, prefix: tuple[int, ...], group: list[TrainingExample]) -> tuple[Any, list[list[float]]]:
        """Importance-sampling loss of sequences that all start with `prefix`."""
        torch = self._torch
        k = len(prefix)
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        b = len(group)
        width = max(len(e.input_tokens) for e in group) - k
        inputs = torch.full((b, width), pad, dtype=torch.long)
        targets = torch.zeros((b, width), dtype=torch.long)
        attention = torch.zeros((b, k + width), dtype=torch.long)
        attention[:, :k] = 1
        adv = torch.zeros((b, width), dtype=torch.float32)
        old = torch.zeros((b, width), dtype=torch.float32)
        has_old = torch.zeros((b, width), dtype=torch.bool)
        trained = torch.zeros((b, width), dtype=torch.bool)
        for i, e in enumerate(group):
            n = len(e.input_tokens) - k
            inputs[i, :n] = torch.tensor(e.input_tokens[k:])
            targets[i, :n] = torch.tensor(e.target_tokens[k:])
            attention[i, k : k + n] = 1
            adv[i, :n] = torch.tensor(e.advantages[k:], dtype=torch.float32)
            trained[i, :n] = torch.tensor(e.trained[k:], dtype=torch.bool)
            if e.sampling_logprobs is not None:
                old[i, :n] = torch.tensor(e.sampling_logprobs[k:], dtype=torch.float32)
                has_old[i, :n] = True
        inputs, targets, attention, adv, old, has_old, trained = (
            t.to(self.device) for t in (inputs, targets, attention, adv, old, has_old, trained)
        )
        past = None
        if k > 0:
            past = self._decoder(input_ids=torch.tensor([prefix], device=self.device), use_cache=True).past_key_values
            if b > 1:
                past.batch_repeat_interleave(b)
        hidden = self._decoder(input_ids=inputs, attention_mask=attention, past_key_values=past,
                               use_cache=past is not None).last_hidden_state
        # Only trained positions need the vocabulary projection (the costly part of a small model).
        logits = self.model.get_output_embeddings()(hidden[trained]).float()
        picked = torch.log_softmax(logits, dim=-1).gather(1, targets[trained][:, None])[:, 0]
        # Without sampler logprobs the ratio is 1 with the on-policy gradient (plain REINFORCE).
        old_rows = torch.where(has_old[trained], old[trained], picked.detach())
        loss = -(torch.exp(picked - old_rows) * adv[trained]).sum()
        logp = torch.zeros((b, width), dtype=torch.float32)
        logp[trained.cpu()] = picked.detach().cpu()
        values = [[0.0] * k + logp[i, : len(e.input_tokens) - k].tolist() for i, e in enumerate(group)]
        return loss, values

    def _ensure_optimizer(self, params: AdamParams) -> Any:
        if self._optimizer is None:
            self._optimizer = self._torch.optim.AdamW(
                self._params(),
                lr=params.learning_rate,
                betas=(params.beta1, params.beta2),
                eps=params.eps,
                weight_decay=0.0,
            )
        return self._optimizer

    def optim_step(self, params: AdamParams) -> None:
        with self._lock:
            opt = self._ensure_optimizer(params)
            for group in opt.param_groups:
                group["lr"] = params.learning_rate
                group["betas"] = (params.beta1, params.beta2)
                group["eps"] = params.eps
            opt.step()
            opt.zero_grad(set_to_none=True)
            self._weights_version += 1

    def update_sampler(self, step: int) -> str | None:
        return None  # sampling reads the live weights

    # --- checkpoints ------------------------------------------------------------------------
    # Layout: <checkpoints_dir>/<name>/adapter (PEFT adapter: the weights for inference) and
    # <name>/trainer_state.pt (adapter + optimizer + sampler RNG: what resuming needs).
    def _checkpoint_folder(self, name: str) -> Path:
        if self.checkpoints_dir is None:
            raise RuntimeError("this backend has no checkpoints_dir")
        return self.checkpoints_dir / name

    def save_sampler_weights(self, name: str) -> str:
        target = self._checkpoint_folder(name) / ADAPTER_DIR
        if (target / "adapter_config.json").is_file():
            return str(target)
        tmp = _temp_sibling(target)
        try:
            with self._lock:
                self.model.save_pretrained(str(tmp))
            os.replace(tmp, target)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return str(target)

    def save_state(self, name: str) -> str:
        torch = self._torch
        from peft import get_peft_model_state_dict

        folder = self._checkpoint_folder(name)
        self.save_sampler_weights(name)
        target = folder / STATE_FILE
        tmp = _temp_sibling(target)
        try:
            with self._lock:
                torch.save(
                    {
                        "adapter": get_peft_model_state_dict(self.model),
                        "optimizer": self._optimizer.state_dict() if self._optimizer is not None else None,
                        "generator": self._generator.get_state(),
                    },
                    tmp,
                )
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return str(folder)

    def load_state(self, path: str) -> None:
        torch = self._torch
        from peft import set_peft_model_state_dict

        state_file = Path(path) / STATE_FILE
        if not state_file.is_file():
            raise FileNotFoundError(f"no resumable state in {path} ({STATE_FILE} missing)")
        state = torch.load(state_file, map_location=self.device, weights_only=False)
        with self._lock:
            set_peft_model_state_dict(self.model, state["adapter"])
            self._weights_version += 1
            if state.get("optimizer") is not None:
                # The optimizer is rebuilt over the same parameters in the same order.
                self._optimizer = torch.optim.AdamW(self._params(), lr=1e-4, weight_decay=0.0)
                self._optimizer.load_state_dict(state["optimizer"])
            if state.get("generator") is not None:
                self._generator.set_state(state["generator"])


def _temp_sibling(target: Path) -> Path:
    """A fresh temporary path next to `target` (same filesystem, so os.replace is atomic)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    return target.with_name(f".{target.name}.tmp-{os.getpid()}-{time.monotonic_ns()}")
