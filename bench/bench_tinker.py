"""Bench: seconds per training step of the Tinker backend, serial (before) vs concurrent (after).

Everything but Tinker itself is real: the trainer's inference server (uvicorn, /generate as
Atropos calls it), `TinkerBackend` and the real tinker SDK (`tinker.ServiceClient`). Tinker is
the loopback server of the tests (tests/fakes/tinker_server.py) with injected latency: every
sample request takes `--sample-s` (1 s), and training requests finish at the next tick of a
`--cycle-s` clock (Tinker's clock cycles; requests submitted together share a tick).

A step: `--groups` groups (8) are sampled at once, as Atropos' workers ask for them, then one
training step runs on them.
- serial (the old behaviour): the inference server samples one request at a time, and the
  trainer waits for forward_backward before submitting optim_step, then for optim_step before
  saving the next sampler weights;
- concurrent (now): up to MCP_RL_REMOTE_SAMPLING_CONCURRENCY samples in flight, and one
  `train_step` submits forward_backward, optim_step and the sampler weights before waiting.
Prints seconds per step of each and their ratio; exit 1 unless concurrent <= 1/3 of serial.
Each step also prints the transitions sampled and trained (the trainer's own selection: no
all-zero-advantage sequence is sent) and the policy lag of what it trains (the trainer's tags).
Costs (mcp_rl.costs): the estimate before the concurrent steps (expected, and its range) and
the estimated cost the backend's meter reports after them for the same steps, at the Qwen3-8B
rates of configs/pricing.yaml; exit 1 unless they agree within 25 %.

    python bench/bench_tinker.py [--steps 3] [--groups 8] [--group-size 4] [--sample-s 1] [--cycle-s 2]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import anyio
import httpx

from mcp_rl.settings import Settings
from mcp_rl.trainer.advantages import select_trained
from mcp_rl.trainer.backends.base import AdamParams, TrainingExample
from mcp_rl.trainer.backends.tinker import TinkerBackend
from mcp_rl.trainer.inference_server import InferenceService, ServerThread, build_app
from mcp_rl.trainer.policy_lag import PolicyVersions, TaggingSampler
from tests.fakes.tinker_server import (
    API_KEY,
    Latency,
    TinkerServer,
    TinkerWire,
    write_tiny_tokenizer,
)
from tests.kit.run_harness import free_port

TARGET_RATIO = 1 / 3
COST_TOLERANCE = 0.25
# The loopback Tinker answers 3 tokens (min(max_tokens, 3)): at 6, half of max tokens, the
# estimate's expected answer length is the real one, so the gap measures the rest of the model.
MAX_NEW_TOKENS = 6
PROMPT = [11, 12, 13, 14, 15, 16, 17, 18]


async def sample_groups(url: str, groups: int, group_size: int) -> list[dict]:
    """`groups` /generate calls at once, like Atropos' workers; returns every completion."""
    out: list[dict] = []
    async with httpx.AsyncClient(base_url=url, timeout=600) as http:

        async def one(g: int) -> None:
            body = {
                "input_ids": PROMPT + [20 + g],
                "return_logprob": True,
                "sampling_params": {"n": group_size, "max_new_tokens": MAX_NEW_TOKENS, "temperature": 1.0},
            }
            r = await http.post("/generate", json=body)
            r.raise_for_status()
            answer = r.json()
            answers = answer if isinstance(answer, list) else [answer]
            for a in answers:
                a["prompt_ids"] = body["input_ids"]
            out.extend(answers)

        async with anyio.create_task_group() as tg:
            for g in range(groups):
                tg.start_soon(one, g)
    return out


def examples_of(completions: list[dict], rng: random.Random) -> list[TrainingExample]:
    examples = []
    for c in completions:
        tokens = [int(t) for _, t, _ in c["meta_info"]["output_token_logprobs"]]
        logprobs = [float(lp) for lp, _, _ in c["meta_info"]["output_token_logprobs"]]
        full = PROMPT + tokens
        trained = [t >= len(PROMPT) - 1 for t in range(len(full) - 1)]
        advantage = rng.choice([-1.0, 1.0])
        examples.append(
            TrainingExample(
                input_tokens=full[:-1],
                target_tokens=full[1:],
                advantages=[advantage if k else 0.0 for k in trained],
                sampling_logprobs=[0.0] * (len(PROMPT) - 1) + logprobs,
                trained=trained,
            )
        )
    return examples


def run(mode: str, args: argparse.Namespace, tokenizer_dir: str, metered: list | None = None) -> list[float]:
    import tinker

    concurrency = 1 if mode == "serial" else Settings.from_env({}).remote_sampling_concurrency
    rng = random.Random(0)
    latency = Latency(sample_s=args.sample_s, cycle_s=args.cycle_s)
    with TinkerServer(TinkerWire(tokenizer_id=tokenizer_dir, latency=latency)) as tinker_server:
        backend = TinkerBackend(
            tinker.ServiceClient(base_url=tinker_server.base_url, api_key=API_KEY),
            base_model="Qwen/Qwen3-8B",
            lora_rank=8,
        )
        backend.prepare()
        port = free_port()
        versions = PolicyVersions()
        service = InferenceService(TaggingSampler(backend, versions))
        server = ServerThread(build_app(service, sampling_concurrency=concurrency), "127.0.0.1", port)
        server.start()
        adam = AdamParams(learning_rate=1e-5)
        times = []
        try:
            for step in range(1, args.steps + 1):
                began = time.monotonic()
                completions = anyio.run(sample_groups, f"http://127.0.0.1:{port}", args.groups, args.group_size)
                examples = examples_of(completions, rng)
                trained = select_trained(examples).examples
                lags = [
                    step
                    - 1
                    - (
                        versions.sampled_at(
                            c["prompt_ids"] + c["output_ids"], [-100] * len(c["prompt_ids"]) + c["output_ids"]
                        )
                        or 0
                    )
                    for c in completions
                ]
                if mode == "serial":
                    backend.forward_backward(examples)
                    backend.optim_step(adam)
                    backend.update_sampler(step)
                else:
                    backend.train_step(trained, adam, step)
                versions.current = step
                times.append(time.monotonic() - began)
                print(
                    f"  {mode:10s} step {step}: {times[-1]:.2f} s, sampled {len(completions)} transitions, "
                    f"trained {len(trained)}, policy lag max {max(lags)} mean {sum(lags) / len(lags):.2f}",
                    flush=True,
                )
        finally:
            server.stop()
            backend.close("success")
            if metered is not None:
                metered.append(backend.meter.total)
    return times


def cost_estimate(args: argparse.Namespace):
    from mcp_rl.costs.estimate import RunShape, estimate_run
    from mcp_rl.costs.rates import tinker_rates

    prompt = len(PROMPT) + 1
    shape = RunShape(
        backend="tinker",
        model="Qwen/Qwen3-8B",
        steps=args.steps,
        batch_size=args.groups * args.group_size,
        group_size=args.group_size,
        max_tokens=MAX_NEW_TOKENS,
        max_sequence=4096,
        prompt_tokens=(prompt, prompt),
    )
    return estimate_run(shape, tinker_rates(Settings.from_env({}), shape.model))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--groups", type=int, default=8)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--sample-s", type=float, default=1.0)
    parser.add_argument("--cycle-s", type=float, default=2.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tokenizer_dir = write_tiny_tokenizer(Path(tmp) / "tokenizer")
        print(
            f"{args.groups} groups of {args.group_size} per step, {args.sample_s:g} s per sample request, "
            f"{args.cycle_s:g} s clock cycle, {args.steps} steps"
        )
        serial = statistics.mean(run("serial", args, tokenizer_dir))
        estimate = cost_estimate(args)
        step_usd = estimate.step_usd
        print(
            f"cost before (estimated): ${step_usd['expected'] * args.steps:.6f} for {args.steps} steps "
            f"(range ${step_usd['low'] * args.steps:.6f}-${step_usd['high'] * args.steps:.6f}; prompt "
            f"{len(PROMPT) + 1} tokens, answers up to {MAX_NEW_TOKENS} tokens)"
        )
        metered: list = []
        concurrent = statistics.mean(run("concurrent", args, tokenizer_dir, metered))
    ratio = concurrent / serial
    print(f"serial:     {serial:.2f} s/step (sampling concurrency 1, waits between fwd/bwd, optim, sampler)")
    print(
        f"concurrent: {concurrent:.2f} s/step (sampling concurrency "
        f"{Settings.from_env({}).remote_sampling_concurrency}, one clock cycle per step)"
    )
    print(f"ratio: {ratio:.3f} (target <= {TARGET_RATIO:.3f})")
    from mcp_rl.costs.meter import usd

    tokens = metered[0]
    rates = estimate_rates(args)
    after = usd(tokens, rates) or 0.0
    before = estimate.step_usd["expected"] * args.steps
    gap = abs(before - after) / after if after else float("inf")
    print(
        f"cost after (estimated from the metered tokens): ${after:.6f} ({tokens.prefill} prefilled, "
        f"{tokens.sampled} sampled, {tokens.trained} trained tokens)"
    )
    print(f"estimate vs reported: {gap:.1%} apart (target <= {COST_TOLERANCE:.0%})")
    return 0 if ratio <= TARGET_RATIO and gap <= COST_TOLERANCE else 1


def estimate_rates(args: argparse.Namespace):
    from mcp_rl.costs.rates import tinker_rates

    return tinker_rates(Settings.from_env({}), "Qwen/Qwen3-8B").rates


if __name__ == "__main__":
    sys.exit(main())
