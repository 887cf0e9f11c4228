"""Local backend: a causal LM in torch (CPU, or a GPU when present) with a LoRA adapter.

Sampling and training share one model object behind a readers-writer lock: changing the
weights (an optimizer step, loading a checkpoint) is exclusive, so a sample never sees weights
halfway through an optimizer step. With `sample_beside_training` a sample may also run while a
step's gradients are computed (from the weights before the step: one step off-policy at most,
which the run's off-policy limit allows or not). It is off by default: on 2 CPU cores the two
slowed each other more than they overlapped (bench/bench_throughput.py, mode mcp-rl-overlap).
Checkpoints are folders in the run directory, written to a temporary name and renamed.
"""

from __future__ import annotations

import logging
import shutil
import threading
from pathlib import Path
from typing import Any

from mcp_rl.atomic import file_written_whole, replace_dir, temp_sibling
from mcp_rl.trainer.backends.base import (
    AdamParams,
    ForwardBackwardResult,
    SampledSequence,
    SamplingRequest,
    TrainingBackend,
    TrainingExample,
)
from mcp_rl.trainer.backends.common_prefix import CommonPrefix, common_length
from mcp_rl.trainer.backends.lora_fold import lora_folded
from mcp_rl.trainer.backends.prompt_cache import PromptCache, croppable
from mcp_rl.trainer.backends.rwlock import ReadWriteLock
from mcp_rl.trainer.cpus import usable_cpus

log = logging.getLogger(__name__)

LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
STATE_FILE = "trainer_state.pt"
ADAPTER_DIR = "adapter"


def configure_torch_threads(threads: int = 0) -> int:
    """`threads` (Settings.torch_threads, MCP_RL_TORCH_THREADS), or half the usable cores (at
    least one; `cpus.usable_cpus`: affinity and container quota, not the host's core count).

    A run shares the machine with its environment process and the Atropos API, and often with
    other runs. torch's default of one thread per core then oversubscribes the CPU, and its
    OpenMP threads wait on each other while descheduled: steps became 10x slower in measurements
    on a shared 2-core machine.
    """
    # torch: only a local-backend process loads it (a Tinker trainer never does)
    import torch

    wanted = threads or max(1, usable_cpus() // 2)
    torch.set_num_threads(wanted)
    return wanted


class LocalBackend(TrainingBackend):
    """`train=False` serves the base model as it is (no optimizer), or base + a saved LoRA
    adapter (`adapter_dir`, a checkpoint's PEFT folder) merged into it."""

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
        sample_beside_training: bool = False,
        adapter_dir: Path | None = None,
        eval_threads: int | None = None,
    ) -> None:
        # torch and transformers: only a local-backend process loads them
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self._torch = torch
        self._weights = ReadWriteLock()
        # One sampling batch at a time (the prompt cache and the generator are not shared), and
        # one gradient computation at a time; the two may overlap.
        self._sampling = threading.Lock()
        self._training = threading.Lock()
        self.sample_beside_training = sample_beside_training
        # Threads of a held-out evaluation (None: every usable core; see sample_greedy).
        self.eval_threads = eval_threads
        self.model_dir = Path(model_dir)
        self.checkpoints_dir = Path(checkpoints_dir) if checkpoints_dir is not None else None
        self.model_name = self.model_dir.name
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        self.tokenizer = AutoTokenizer.from_pretrained(str(self.model_dir))
        model = AutoModelForCausalLM.from_pretrained(str(self.model_dir), dtype=torch.float32)
        model.to(self.device)
        model.eval()  # no dropout in sampling or training: sampler and trainer logprobs must agree
        self.trainable = train
        if adapter_dir is not None and not train:
            # A saved checkpoint served as a model: its LoRA adapter merged into the base weights,
            # so sampling is the base model's code path (the same logprobs as base + adapter).
            from peft import PeftModel

            model = PeftModel.from_pretrained(model, str(adapter_dir), is_trainable=False).merge_and_unload()
            model.eval()
        if train:
            # peft: only when the model gets a LoRA adapter
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
        return self.sample_batch([request])[0]

    def sample_batch(self, requests: list[SamplingRequest]) -> list[list[SampledSequence]]:
        """The completions of several requests, decoded together: each prompt is prefilled on
        its own (through the prompt cache), then every sequence of every request advances in
        ONE batched decode loop. Every decode step reads all the weights, so one step of 32
        rows costs far less than eight steps of 4: this is where batching pays (8 groups of 4
        sampled in 1.9 s instead of 3.4 s one group at a time, bench/bench_throughput.py)."""
        if any(not r.prompt_tokens for r in requests):
            raise ValueError("empty prompt")
        weights = self._weights.shared() if self.sample_beside_training else self._weights.exclusive()
        with self._sampling, weights, self._torch.no_grad():
            prefills = [self._prefill(r) for r in requests]
            if len(requests) > 1 and not all(croppable(past) for past, _ in prefills):
                # Caches of different prompts are merged by left padding, which only plain
                # full-attention layers allow (the condition for cropping a cache too).
                return [self._decode([r], [p])[0] for r, p in zip(requests, prefills, strict=True)]
            return self._decode(requests, prefills)

    def top_logprobs(self, prompt: list[int], completion: list[int], k: int) -> list[list[tuple[int, float]]]:
        """One teacher-forced forward over prompt + completion (asked for by an OpenAI client's
        top_logprobs; sampling itself keeps only the chosen token's logprob)."""
        if not completion or k <= 0:
            return [[] for _ in completion]
        torch = self._torch
        weights = self._weights.shared() if self.sample_beside_training else self._weights.exclusive()
        with self._sampling, weights, torch.no_grad():
            ids = torch.tensor([prompt + completion[:-1]], device=self.device)
            logits = self.model(input_ids=ids, use_cache=False).logits[0, len(prompt) - 1 :, :].float()
            best = torch.log_softmax(logits, dim=-1).topk(min(k, logits.shape[-1]), dim=-1)
        return [
            [(int(t), float(v)) for t, v in zip(tokens, values, strict=True)]
            for tokens, values in zip(best.indices.tolist(), best.values.tolist(), strict=True)
        ]

    def sample_greedy(self, prompts: list[list[int]], max_tokens: int) -> list[list[int]]:
        """Greedy completions of many prompts in one batch (held-out evaluation): their shared
        prefix computed once, one forward for the rest (mcp_rl.trainer.local_greedy), through
        the adapter folded into the base weights (lora_fold.py). The weights are held
        exclusively: nothing may compute gradients while the adapter is switched off.

        It runs on every usable core (unless `eval_threads` says otherwise): meanwhile the run's
        environment waits for this sampler and the API is idle, and its batches of ~100 rows are
        large matmuls, which a second thread speeds up (201 arithmetic items: ~11 s on one
        thread, ~8 s on two), unlike the small operators of training and sampling (one thread
        on two cores, `configure_torch_threads`)."""
        from mcp_rl.trainer.local_greedy import greedy_completions  # only evaluations need it

        torch = self._torch
        threads = torch.get_num_threads()
        with self._sampling, self._weights.exclusive(), torch.no_grad(), lora_folded(self.model):
            torch.set_num_threads(self.eval_threads or max(threads, usable_cpus()))
            try:
                return greedy_completions(self.model, prompts, max_tokens, self.eos_ids, self.device)
            finally:
                torch.set_num_threads(threads)

    def _prefill(self, request: SamplingRequest) -> tuple[Any, Any]:
        """(KV cache of the prompt, logits after it), through the prompt cache: a prompt that
        extends a recent one (the next turn of an episode, the shared instructions of a
        batch) only computes its new tokens."""
        torch = self._torch
        reused, past = self.prompt_cache.lookup(request.prompt_tokens, self._weights_version)
        prompt = torch.tensor([request.prompt_tokens[reused:]], device=self.device)
        out = self.model(input_ids=prompt, past_key_values=past, use_cache=True, logits_to_keep=1)
        self.prompt_cache.store(request.prompt_tokens, out.past_key_values, self._weights_version)
        return out.past_key_values, out.logits[:, -1, :].float()

    def _decode(self, requests: list[SamplingRequest], prefills: list[tuple[Any, Any]]) -> list[list[SampledSequence]]:
        torch = self._torch
        # Row r of the batch is a sample of request `row_request[r]` (a request's rows are adjacent).
        row_request = [j for j, r in enumerate(requests) for _ in range(max(1, r.n))]
        counts = [max(1, r.n) for r in requests]
        lengths = torch.tensor([len(requests[j].prompt_tokens) for j in row_request], dtype=torch.long)
        width = int(lengths.max())
        padded = bool((lengths != width).any())
        past = _merge_caches([p for p, _ in prefills], counts, width) if len(requests) > 1 else prefills[0][0]
        if len(requests) == 1 and counts[0] > 1:
            past.batch_repeat_interleave(counts[0])
        logits = torch.cat([lg.expand(c, -1) for (_, lg), c in zip(prefills, counts, strict=True)])
        # Left padding is masked out; positions count each row's own tokens (the cached keys
        # already carry their rotary positions, so padding changes nothing a row attends to).
        attention = (torch.arange(width)[None, :] >= (width - lengths)[:, None]).long().to(self.device)
        positions = lengths.to(self.device)[:, None]
        generators = [
            self._generator if r.seed is None else torch.Generator(device="cpu").manual_seed(r.seed) for r in requests
        ]
        stop_ids = [set(self.eos_ids) | set(r.stop_token_ids) for r in requests]
        tokens: list[list[int]] = [[] for _ in row_request]
        logprobs: list[list[float]] = [[] for _ in row_request]
        # Why each row ended ("stop", "length"), None while it runs.
        done: list[str | None] = ["length" if requests[j].max_tokens <= 0 else None for j in row_request]
        live = list(range(len(row_request)))  # the batch's rows, as global row ids
        while True:
            self._step_rows(requests, generators, stop_ids, row_request, live, logits, tokens, logprobs, done)
            if all(done[r] for r in live):
                break
            keep = self._rows_to_keep(requests, row_request, live, done)
            if keep is not None:
                index = torch.tensor(keep, device=self.device)
                past.batch_select_indices(index)
                attention, positions, logits = attention[index], positions[index], logits[index]
                live = [live[i] for i in keep]
            last = torch.tensor([tokens[r][-1] if tokens[r] else 0 for r in live], device=self.device)[:, None]
            attention = torch.cat([attention, torch.ones_like(attention[:, :1])], dim=1)
            out = self.model(
                input_ids=last,
                past_key_values=past,
                use_cache=True,
                attention_mask=attention if padded else None,
                position_ids=positions,
            )
            positions = positions + 1
            past = out.past_key_values
            logits = out.logits[:, -1, :].float()
        seqs = [
            SampledSequence(tokens=t, logprobs=lp, finish_reason=d or "length")  # type: ignore[arg-type]
            for t, lp, d in zip(tokens, logprobs, done, strict=True)
        ]
        starts = [sum(counts[:j]) for j in range(len(counts))]
        return [seqs[start : start + c] for start, c in zip(starts, counts, strict=True)]

    def _step_rows(
        self,
        requests: list[SamplingRequest],
        generators: list[Any],
        stop_ids: list[set[int]],
        row_request: list[int],
        live: list[int],
        logits: Any,
        tokens: list[list[int]],
        logprobs: list[list[float]],
        done: list[str | None],
    ) -> None:
        """Pick the next token of every live row (each request with its own temperature, top_p
        and generator) and record it with its logprob under the unscaled distribution."""
        torch = self._torch
        logp = torch.log_softmax(logits, dim=-1)
        by_request: dict[int, list[int]] = {}
        for i, r in enumerate(live):
            by_request.setdefault(row_request[r], []).append(i)
        for j, idx in by_request.items():
            request = requests[j]
            rows = torch.tensor(idx, device=logits.device)
            picked = self._pick(logits[rows], request, generators[j])
            chosen = logp[rows].gather(1, picked[:, None])[:, 0]
            for i, tok, lp in zip(idx, picked.tolist(), chosen.tolist(), strict=True):
                r = live[i]
                if done[r]:
                    continue
                tokens[r].append(tok)
                logprobs[r].append(lp)
                if tok in stop_ids[j] or (request.stop and self._hits_stop(tokens[r], request.stop)):
                    done[r] = "stop"
                elif len(tokens[r]) >= request.max_tokens:
                    done[r] = "length"

    @staticmethod
    def _rows_to_keep(
        requests: list[SamplingRequest], row_request: list[int], live: list[int], done: list[str | None]
    ) -> list[int] | None:
        """Batch positions worth decoding on, or None to keep the batch as it is. Dropping rows
        copies the whole KV cache, so it waits until a quarter of the rows are finished. The
        rows of a seeded request stay until all of them are done: its generator then draws
        exactly as it would for that request alone."""
        finished = [
            bool(done[r])
            and (
                requests[row_request[r]].seed is None or all(done[q] for q in live if row_request[q] == row_request[r])
            )
            for r in live
        ]
        if sum(finished) * 4 < len(live):
            return None
        return [i for i, f in enumerate(finished) if not f]

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
        with self._training, self._weights.shared():
            return self._forward_backward_locked(examples)

    def _forward_backward_locked(self, examples: list[TrainingExample]) -> ForwardBackwardResult:
        """Sequences of one group share their prompt: it is run once per group and its KV cache
        (which keeps the autograd graph) is shared by the group's completions. With short answers
        to a long prompt this is most of the compute saved."""
        shared: dict[tuple[int, ...], list[int]] = {}
        for i, e in enumerate(examples):
            if not any(e.trained):
                continue  # nothing to learn (its empty loss would not even reshape)
            first = e.trained.index(True)
            shared.setdefault(tuple(e.input_tokens[:first]), []).append(i)
        total = 0.0
        training_logprobs: list[list[float]] = [[0.0] * len(e.input_tokens) for e in examples]
        # What every group's prompt starts with runs once for the batch (common_prefix.py).
        n = common_length(list(shared))
        common = CommonPrefix.compute(self._decoder, next(iter(shared))[:n], self.device) if n else None
        for prefix, members in shared.items():
            loss, picked = self._group_loss(prefix, [examples[i] for i in members], common)
            loss.backward()
            total += float(loss.detach())
            for i, values in zip(members, picked, strict=True):
                training_logprobs[i] = values
        if common is not None:
            common.backward()
        return ForwardBackwardResult(loss=total, training_logprobs=training_logprobs)

    def _group_loss(
        self, prefix: tuple[int, ...], group: list[TrainingExample], common: CommonPrefix | None = None
    ) -> tuple[Any, list[list[float]]]:
        """Importance-sampling loss of sequences that all start with `prefix` (whose first
        `common.length` tokens, when given, are already computed)."""
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
        if k > 0 and common is not None:
            rest = torch.tensor([prefix[common.length :]], device=self.device)
            past = self._decoder(input_ids=rest, past_key_values=common.cache(), use_cache=True).past_key_values
        elif k > 0:
            past = self._decoder(input_ids=torch.tensor([prefix], device=self.device), use_cache=True).past_key_values
        if past is not None and b > 1:
            past.batch_repeat_interleave(b)
        hidden = self._decoder(
            input_ids=inputs, attention_mask=attention, past_key_values=past, use_cache=past is not None
        ).last_hidden_state
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
        with self._training, self._weights.exclusive():
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
        """Always written anew: after a crash and resume, an adapter/ left by the earlier attempt
        holds older weights than the trainer_state.pt saved beside it now."""
        target = self._checkpoint_folder(name) / ADAPTER_DIR
        tmp = temp_sibling(target)
        try:
            with self._weights.shared():
                self.model.save_pretrained(str(tmp))
            replace_dir(tmp, target)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return str(target)

    def save_state(self, name: str) -> str:
        torch = self._torch
        # peft: only a local-backend process loads it
        from peft import get_peft_model_state_dict

        folder = self._checkpoint_folder(name)
        self.save_sampler_weights(name)
        with file_written_whole(folder / STATE_FILE) as tmp:
            with self._training, self._weights.shared():
                torch.save(
                    {
                        "adapter": get_peft_model_state_dict(self.model),
                        "optimizer": self._optimizer.state_dict() if self._optimizer is not None else None,
                        "generator": self._generator.get_state(),
                    },
                    tmp,
                )
        return str(folder)

    def load_state(self, path: str) -> None:
        torch = self._torch
        # peft: only a local-backend process loads it
        from peft import set_peft_model_state_dict

        state_file = Path(path) / STATE_FILE
        if not state_file.is_file():
            raise FileNotFoundError(f"no resumable state in {path} ({STATE_FILE} missing)")
        state = torch.load(state_file, map_location=self.device, weights_only=False)
        with self._training, self._weights.exclusive():
            set_peft_model_state_dict(self.model, state["adapter"])
            self._weights_version += 1
            if state.get("optimizer") is not None:
                # The optimizer is rebuilt over the same parameters in the same order.
                self._optimizer = torch.optim.AdamW(self._params(), lr=1e-4, weight_decay=0.0)
                self._optimizer.load_state_dict(state["optimizer"])
            if state.get("generator") is not None:
                self._generator.set_state(state["generator"])


def _merge_caches(caches: list[Any], counts: list[int], width: int) -> Any:
    """One batched cache from caches of batch one: cache i repeated counts[i] times (one row per
    sample) and left-padded with zeros to `width` positions (the attention mask hides them).
    Reuses the first cache object."""
    # torch: only a local-backend process loads it
    import torch
    import torch.nn.functional as F

    merged = caches[0]
    for index, layer in enumerate(merged.layers):
        parts = [(c.layers[index].keys, c.layers[index].values) for c in caches]
        pads = [width - k.shape[-2] for k, _ in parts]
        layer.keys = torch.cat(
            [F.pad(k, (0, 0, p, 0)).expand(n, -1, -1, -1) for (k, _), p, n in zip(parts, pads, counts, strict=True)]
        )
        layer.values = torch.cat(
            [F.pad(v, (0, 0, p, 0)).expand(n, -1, -1, -1) for (_, v), p, n in zip(parts, pads, counts, strict=True)]
        )
    return merged
