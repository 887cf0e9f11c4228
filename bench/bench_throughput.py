"""Bench: sequences per second of the mcp-rl local pipeline against the plainest batched loop.

Same model, same prompts, same shape (8 arithmetic prompts x 4 samples, up to 16 new tokens, a
training step on the 32 sequences), in one process, the modes' steps interleaved round-robin so
that a loaded machine slows them alike:

  plain          one batched `model.generate` of 32 sequences (left padding), then a full
                 fine-tune REINFORCE step (AdamW on every weight).
  mcp-rl         the trainer's local path in-process: the inference server (real HTTP on
                 127.0.0.1, the trainer's batching sampler) gets the 8 groups as 8 concurrent
                 `/generate` requests (as an environment's workers send them), the answers become
                 Atropos groups, then `build_examples` and the backend's `train_step` (LoRA).
                 Not measured: the environment process and the Atropos API in between.
  mcp-rl-overlap the same, with the next step's 8 requests sampled while this step trains (the
                 backend's `sample_beside_training` option, off in runs: what a run would do when
                 its off-policy limit allows one step and the environment's workers keep asking
                 while the trainer computes). Each measured step trains on the batch sampled
                 during the previous one; its wall time covers both.
  mcp-rl-serial  mcp-rl with the sampler as it was before batching: one request at a time.

Prints sequences/s of each (32 per step / the step's wall seconds) and the ratios; exit 1 if
mcp-rl is below 0.9x the plain loop.

    python bench/bench_throughput.py [--steps 3] [--modes plain,mcp-rl,mcp-rl-overlap,mcp-rl-serial]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from mcp_rl.models import resolve_model
from mcp_rl.settings import Settings

TARGET_RATIO = 0.9
MASKED = -100
PROMPT_LOGPROB = 1.0


@dataclass
class Timing:
    sample_s: list[float] = field(default_factory=list)  # overlapped: sampling beside training
    train_s: list[float] = field(default_factory=list)
    wall_s: list[float] = field(default_factory=list)
    sequences: int = 0
    reward: list[float] = field(default_factory=list)

    def record(self, sample_s: float, train_s: float, wall_s: float, sequences: int, reward: float) -> None:
        self.sample_s.append(sample_s)
        self.train_s.append(train_s)
        self.wall_s.append(wall_s)
        self.sequences += sequences
        self.reward.append(reward)

    def per_second(self) -> float:
        return self.sequences / sum(self.wall_s)


def problems(step: int, count: int) -> list[dict[str, int]]:
    rng = random.Random(1000 + step)
    out = []
    for _ in range(count):
        a, b = rng.randint(1, 9), rng.randint(1, 9)
        out.append({"a": a, "op": "+", "b": b, "answer": a + b})
    return out


class Plain:
    """The plainest loop: HF generate on a left-padded batch, REINFORCE, AdamW on all weights."""

    def __init__(self, model_dir: Path, lr: float) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.torch = torch
        self.tok = AutoTokenizer.from_pretrained(str(model_dir), padding_side="left")
        if self.tok.pad_token_id is None:
            self.tok.pad_token = self.tok.eos_token
        self.model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
        self.model.eval()
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=lr, weight_decay=0.0)

    def step(self, prompts: list[list[int]], answers: list[int], samples: int, new_tokens: int, timing: Timing) -> None:
        from mcp_rl.environments.bundled.arithmetic import score_answer

        torch = self.torch
        width = max(len(p) for p in prompts)
        pad = self.tok.pad_token_id
        ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts])
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
        t0 = time.monotonic()
        with torch.no_grad():
            out = self.model.generate(
                input_ids=ids,
                attention_mask=mask,
                do_sample=True,
                temperature=1.0,
                top_k=0,
                top_p=1.0,
                max_new_tokens=new_tokens,
                num_return_sequences=samples,
                pad_token_id=pad,
            )
        t1 = time.monotonic()
        completions = out[:, width:]
        eos = set(self.tok.all_special_ids) & {self.tok.eos_token_id, pad}
        comp_mask = torch.ones_like(completions)
        for i in range(completions.shape[0]):  # up to and including the first end token
            for t in range(completions.shape[1]):
                if int(completions[i, t]) in eos:
                    comp_mask[i, t + 1 :] = 0
                    break
        texts = [self.tok.decode(c[m.bool()], skip_special_tokens=True) for c, m in zip(completions, comp_mask)]
        rewards = torch.tensor([score_answer(text, answers[i // samples]) for i, text in enumerate(texts)])
        adv = (rewards.view(-1, samples) - rewards.view(-1, samples).mean(1, keepdim=True)).view(-1)
        full_mask = torch.cat([mask.repeat_interleave(samples, 0), comp_mask], dim=1)
        # Logits of the completion positions only (the vocabulary projection of every prompt
        # position would be most of the step's cost, and no loop needs it).
        logits = (
            self.model(input_ids=out, attention_mask=full_mask, logits_to_keep=completions.shape[1] + 1)
            .logits[:, :-1]
            .float()
        )
        logp = torch.log_softmax(logits, -1).gather(2, completions[..., None])[..., 0]
        loss = -((logp * comp_mask).sum(1) * adv).sum()
        loss.backward()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        t2 = time.monotonic()
        timing.record(t1 - t0, t2 - t1, t2 - t0, completions.shape[0], float(rewards.mean()))


class Pipeline:
    """The trainer's local path: inference server + sampler + build_examples + train_step."""

    def __init__(
        self,
        model_dir: Path,
        settings: Settings,
        lr: float,
        lora_rank: int,
        *,
        batched: bool,
        overlap: bool,
        workdir: Path,
    ) -> None:
        import socket

        from mcp_rl.trainer.backends.local import LocalBackend
        from mcp_rl.trainer.batcher import batching_sampler
        from mcp_rl.trainer.inference_server import (
            InferenceService,
            ServerThread,
            build_app,
        )

        self.backend = LocalBackend(
            model_dir, lora_rank=lora_rank, checkpoints_dir=workdir, sample_beside_training=overlap
        )
        self.tok = self.backend.tokenizer
        self.sampler: Any = self.backend
        concurrency = 1
        if batched:  # as Trainer._serve builds it
            self.sampler = batching_sampler(self.backend, settings)
            concurrency = self.sampler.max_requests
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self.server = ServerThread(
            build_app(InferenceService(self.sampler), sampling_concurrency=concurrency), "127.0.0.1", port
        )
        self.server.start()
        self.url = f"http://127.0.0.1:{port}/generate"
        self.lr = lr
        self.steps = 0
        self.overlap = overlap
        self.name = "mcp-rl-overlap" if overlap else ("mcp-rl" if batched else "mcp-rl-serial")
        self.carry: tuple[list[dict[str, Any]], list[float]] | None = None

    def close(self) -> None:
        self.server.stop()
        if hasattr(self.sampler, "close"):
            self.sampler.close()

    def sample(
        self, prompts: list[list[int]], answers: list[int], samples: int, new_tokens: int
    ) -> tuple[list[dict[str, Any]], list[float]]:
        """The 8 groups as Atropos groups (and their rewards), requested at once as an
        environment's workers request them."""
        import httpx

        from mcp_rl.environments.bundled.arithmetic import score_answer

        replies: list[Any] = [None] * len(prompts)
        errors: list[Exception] = []

        def request(i: int) -> None:
            body = {
                "input_ids": prompts[i],
                "return_logprob": True,
                "sampling_params": {"n": samples, "max_new_tokens": new_tokens, "temperature": 1.0},
            }
            try:
                with httpx.Client(timeout=600) as client:
                    reply = client.post(self.url, json=body)
                    reply.raise_for_status()
                    replies[i] = reply.json()
            except Exception as exc:
                errors.append(exc)

        threads = [threading.Thread(target=request, args=(i,)) for i in range(len(prompts))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(900)
        if errors:
            raise errors[0]
        batch, rewards = [], []
        for prompt, answer, outs in zip(prompts, answers, replies, strict=True):
            group: dict[str, Any] = {"tokens": [], "masks": [], "scores": [], "inference_logprobs": []}
            for o in outs:
                completion = o["output_ids"]
                score = score_answer(o["text"], answer)
                rewards.append(score)
                group["tokens"].append(prompt + completion)
                group["masks"].append([MASKED] * len(prompt) + completion)
                group["scores"].append(score)
                group["inference_logprobs"].append(
                    [PROMPT_LOGPROB] * len(prompt) + [e[0] for e in o["meta_info"]["output_token_logprobs"]]
                )
            batch.append(group)
        return batch, rewards

    def train(self, batch: list[dict[str, Any]]) -> int:
        from mcp_rl.trainer.advantages import build_examples
        from mcp_rl.trainer.backends.base import AdamParams

        examples, _ = build_examples(batch)
        self.steps += 1
        self.backend.train_step(examples, AdamParams(learning_rate=self.lr), self.steps)
        return len(examples)

    def step(self, prompts: list[list[int]], answers: list[int], samples: int, new_tokens: int, timing: Timing) -> None:
        t0 = time.monotonic()
        if not self.overlap:
            batch, rewards = self.sample(prompts, answers, samples, new_tokens)
            t1 = time.monotonic()
            n = self.train(batch)
            t2 = time.monotonic()
            timing.record(t1 - t0, t2 - t1, t2 - t0, n, statistics.mean(rewards))
            return
        if self.carry is None:  # the first step has nothing sampled yet
            self.carry = self.sample(prompts, answers, samples, new_tokens)
            t0 = time.monotonic()
        batch, rewards = self.carry
        sampled: dict[str, Any] = {}

        def sample_next() -> None:
            started = time.monotonic()
            sampled["result"] = self.sample(prompts, answers, samples, new_tokens)
            sampled["seconds"] = time.monotonic() - started

        beside = threading.Thread(target=sample_next)
        beside.start()
        t1 = time.monotonic()
        n = self.train(batch)
        train_s = time.monotonic() - t1
        beside.join(900)
        if "result" not in sampled:
            raise RuntimeError("sampling beside training failed")
        self.carry = sampled["result"]
        timing.record(sampled["seconds"], train_s, time.monotonic() - t0, n, statistics.mean(rewards))


def machine() -> str:
    """The processor, as `lscpu` names it, and the core count: printed with every figure."""
    import os

    name = "unknown processor"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{name}, {os.cpu_count()} cores"


def prompt_tokens(tok: Any, step: int, count: int) -> tuple[list[list[int]], list[int]]:
    """The step's arithmetic prompts as the environment renders them, and their answers."""
    from mcp_rl.environments.bundled.arithmetic import build_messages

    items = problems(step, count)
    prompts = [
        tok.encode(
            tok.apply_chat_template(build_messages(p), add_generation_prompt=True, tokenize=False),
            add_special_tokens=False,
        )
        for p in items
    ]
    return prompts, [p["answer"] for p in items]


def plain_reference(model_dir: Path, steps: int = 2, prompts: int = 8, samples: int = 4, new_tokens: int = 16) -> float:
    """Sequences per second of the plain batched loop (after one warm-up step), with the torch
    threads already configured: the yardstick other benches print beside their own figures, so
    that figures measured on two machines compare as ratios."""
    plain = Plain(model_dir, lr=1e-5)
    timing = Timing()
    for step in range(steps + 1):
        batch, answers = prompt_tokens(plain.tok, step, prompts)
        plain.step(batch, answers, samples, new_tokens, timing if step > 0 else Timing())
    return timing.per_second()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3, help="measured steps per mode (after one warm-up step)")
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--new-tokens", type=int, default=16)
    parser.add_argument("--lora-rank", type=int, default=8)
    parser.add_argument("--modes", default="plain,mcp-rl,mcp-rl-overlap,mcp-rl-serial")
    args = parser.parse_args()
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = set(modes) - {"plain", "mcp-rl", "mcp-rl-overlap", "mcp-rl-serial"}
    if unknown:
        parser.error(f"unknown modes {sorted(unknown)}")

    from mcp_rl.trainer.backends.local import configure_torch_threads

    settings = Settings.from_env()
    model_dir = resolve_model(settings, "default")
    threads = configure_torch_threads(settings.torch_threads)
    work = Path(tempfile.mkdtemp(prefix="mcp-rl-bench-throughput-"))
    runners: dict[str, Any] = {}
    for mode in modes:
        if mode == "plain":
            runners[mode] = Plain(model_dir, lr=1e-5)
        else:
            runners[mode] = Pipeline(
                model_dir,
                settings,
                lr=5e-4,
                lora_rank=args.lora_rank,
                batched=mode != "mcp-rl-serial",
                overlap=mode == "mcp-rl-overlap",
                workdir=work / mode,
            )
    tok = next(iter(runners.values())).tok
    print(
        f"bench: {machine()}; {model_dir.name}, {args.prompts} prompts x {args.samples} samples, up to {args.new_tokens} new "
        f"tokens, torch threads {threads}, batching window {settings.local_batch_window_s:g} s; "
        f"{args.steps} measured steps per mode after a warm-up, modes interleaved",
        flush=True,
    )
    timings = {m: Timing() for m in modes}
    try:
        for step in range(args.steps + 1):
            prompts, answers = prompt_tokens(tok, step, args.prompts)
            for mode in modes:
                timing = timings[mode] if step > 0 else Timing()  # step 0 warms up
                runners[mode].step(prompts, answers, args.samples, args.new_tokens, timing)
                label = "warm-up" if step == 0 else f"step {step}"
                print(
                    f"  {label:>8} {mode:<14} sample {timing.sample_s[-1]:6.2f} s  train {timing.train_s[-1]:6.2f} s"
                    f"  wall {timing.wall_s[-1]:6.2f} s",
                    flush=True,
                )
    finally:
        for runner in runners.values():
            if isinstance(runner, Pipeline):
                runner.close()
    print(
        f"{'mode':<14} {'seq/s':>7} {'sample s/step':>14} {'train s/step':>13} {'wall s/step':>12} "
        f"{'median wall':>12} {'reward':>7}"
    )
    for mode, t in timings.items():
        print(
            f"{mode:<14} {t.per_second():>7.2f} {statistics.mean(t.sample_s):>14.2f} "
            f"{statistics.mean(t.train_s):>13.2f} {statistics.mean(t.wall_s):>12.2f} "
            f"{statistics.median(t.wall_s):>12.2f} {statistics.mean(t.reward):>7.2f}"
        )
    for runner in runners.values():
        if isinstance(runner, Pipeline) and hasattr(runner.sampler, "stats_snapshot"):
            s = runner.sampler.stats_snapshot()
            print(
                f"{runner.name} sampler: {s.batches} batches, {s.requests / max(1, s.batches):.1f} requests per batch "
                f"(largest {s.largest})"
            )
    ok = True
    if "plain" in timings:
        base = timings["plain"].per_second()
        print(f"reference (same run): the plain batched loop, {base:.2f} sequences/s on {machine()}")
        for mode in modes:
            if mode != "plain":
                ratio = timings[mode].per_second() / base
                print(f"{mode} / plain: {ratio:.2f}x")
                if mode == "mcp-rl" and ratio < TARGET_RATIO:
                    ok = False
    if "mcp-rl" in timings and "mcp-rl-serial" in timings:
        print(f"mcp-rl / mcp-rl-serial: {timings['mcp-rl'].per_second() / timings['mcp-rl-serial'].per_second():.2f}x")
    print("PASS" if ok else f"FAIL: mcp-rl below {TARGET_RATIO}x the plain loop")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
