"""`mcp-rl serve-model`: a saved checkpoint answers a real openai client with base + adapter,
and a served model is a process mcp-rl accounts for and stops (pid + start time + marker)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mcp_rl.evaluation import serving
from mcp_rl.processes import Liveness, prove
from mcp_rl.settings import Settings
from tests.conftest import REPO, make_env
from tests.kit.runs import json_line, write_local_checkpoint_run

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def _cli(home: Path, *args: str, timeout: float = 200) -> subprocess.CompletedProcess[str]:
    env = make_env(home, PATH=os.environ.get("PATH", ""))
    return subprocess.run(
        [sys.executable, "-m", "mcp_rl", "serve-model", *args],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _direct_logprobs(model, prompt_ids: list[int], completion_ids: list[int]) -> list[float]:
    import torch

    ids = torch.tensor([prompt_ids + completion_ids])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0].float()
    logprobs = torch.log_softmax(logits, dim=-1)
    start = len(prompt_ids)
    return [float(logprobs[start + i - 1, tok]) for i, tok in enumerate(completion_ids)]


def test_serve_model_answers_openai_client_with_base_plus_adapter(home: Path, model_dir: Path) -> None:
    import openai
    from transformers import AutoTokenizer

    settings = Settings.from_env(make_env(home))
    _, peft_model = write_local_checkpoint_run(settings, "r1", model_dir, steps=(2,))

    began = time.monotonic()
    started = _cli(home, "r1", "--detach", "--json")
    startup_s = time.monotonic() - began
    assert started.returncode == 0, started.stderr
    info = json_line(started.stdout)
    print(f"serve-model start-up: {startup_s:.1f} s (server ready after {info['startup_s']} s)")
    assert info["model"] == "run:r1@2" and info["base_url"].startswith("http://127.0.0.1:")
    record = serving.load(settings, info["serve_id"])
    # Ours by identity: pid + start time + the served model's own marker.
    assert prove(record.pid, record.create_time, record.marker).liveness == Liveness.ALIVE
    try:
        client = openai.OpenAI(base_url=info["base_url"], api_key="unused", max_retries=0, timeout=60)
        tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
        prompt = "Question: what is 12 + 7?\nAnswer:"
        out = client.completions.create(model=info["model"], prompt=prompt, max_tokens=8, temperature=0, logprobs=1)
        choice = out.choices[0]
        assert out.model == "run:r1@2"
        token_ids = choice.logprobs.model_extra["token_ids"]
        served = choice.logprobs.token_logprobs
        assert len(token_ids) == len(served) >= 1
        prompt_ids = list(tokenizer.encode(prompt, add_special_tokens=False))
        direct = _direct_logprobs(peft_model, prompt_ids, token_ids)
        diffs = [abs(a - b) for a, b in zip(served, direct, strict=True)]
        assert max(diffs) < 2e-3, (served, direct)
        # The adapter matters: with it disabled the same tokens get other logprobs.
        with peft_model.disable_adapter():
            without = _direct_logprobs(peft_model, prompt_ids, token_ids)
        assert max(abs(a - b) for a, b in zip(served, without, strict=True)) > 10 * max(diffs)

        chat = client.chat.completions.create(
            model=info["model"],
            messages=[{"role": "user", "content": "Say hi."}],
            max_tokens=6,
            temperature=0,
            logprobs=True,
        )
        assert chat.choices[0].logprobs is not None and len(chat.choices[0].logprobs.content) >= 1

        listing = _cli(home, "--list", "--json")
        assert info["serve_id"] in listing.stdout
    finally:
        stopped = _cli(home, "--stop", info["serve_id"], "--json")
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert json_line(stopped.stdout)["stopped"] is True
    # Ended (a zombie until whoever inherited the detached server reaps it).
    assert prove(record.pid, record.create_time, record.marker).liveness in (Liveness.GONE, Liveness.ZOMBIE)
    assert serving.list_served(settings) == []
