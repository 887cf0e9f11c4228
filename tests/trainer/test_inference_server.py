"""The inference server (via `serve_model`, the same code the trainer runs) spoken to by the
clients that really use it: atroposlib's SGLang server type and ManagedServer, and the OpenAI SDK."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.kit.run_harness import child_env, free_port, http_ok, start
from tests.kit.wait import wait_for

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, default_model: Path) -> Iterator[str]:
    tmp = tmp_path_factory.mktemp("model")
    port = free_port()
    proc = start(
        "model",
        [sys.executable, "-m", "mcp_rl.trainer.serve_model", "--model", str(default_model), "--port", str(port)],
        tmp / "model.log",
        child_env(tmp),
        tmp,
    )
    try:
        wait_for(lambda: http_ok(f"http://127.0.0.1:{port}/health"), 180, "model server", watch=[proc])
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.stop()


def sglang_config(url: str):
    from atroposlib.envs.server_handling.server_baseline import APIServerConfig

    model = os.environ["MCP_RL_MODEL"]
    return APIServerConfig(
        model_name=model,
        tokenizer_name=model,
        base_url=f"{url}/v1",
        api_key="x",
        server_type="sglang",
        health_check=False,
        timeout=120,
    )


@pytest.mark.anyio
async def test_sglang_server_type_gets_tokens_and_logprobs(server: str) -> None:
    from atroposlib.envs.server_handling.sglang_server import SGLangServer

    client = SGLangServer(sglang_config(server))
    prompt = client.tokenizer.encode("2 + 2 =", add_special_tokens=False)
    prompt_tokens, outputs, logprobs, finish = await client.tokens_and_logprobs_completion(
        input_ids=prompt, n=3, max_tokens=6, temperature=1.0
    )
    assert prompt_tokens == prompt
    assert len(outputs) == len(logprobs) == len(finish) == 3
    for out, lps in zip(outputs, logprobs, strict=True):
        assert 1 <= len(out) <= 6 and len(lps) == len(out)
        assert all(lp <= 0.0 for lp in lps)


@pytest.mark.anyio
async def test_managed_server_tracks_masked_tokens(server: str) -> None:
    from atroposlib.envs.server_handling.server_manager import ServerManager

    manager = ServerManager([sglang_config(server)])
    async with manager.managed_server() as managed:
        reply = await managed.chat_completion(messages=[{"role": "user", "content": "Say hi"}], n=2, max_tokens=5)
        nodes = managed.get_state()["nodes"]
    assert len(reply.choices) == 2 and len(nodes) == 2
    for node in nodes:
        assert len(node.tokens) == len(node.masked_tokens) == len(node.logprobs)
        completion = [lp for t, lp in zip(node.masked_tokens, node.logprobs, strict=True) if t != -100]
        assert completion and all(lp <= 0.0 for lp in completion)


def test_openai_sdk_chat_and_completions(server: str) -> None:
    import openai

    client = openai.OpenAI(base_url=f"{server}/v1", api_key="x")
    chat = client.chat.completions.create(
        model="default", messages=[{"role": "user", "content": "2 + 3"}], n=2, max_tokens=8, logprobs=True
    )
    assert len(chat.choices) == 2 and chat.model == "default"
    assert chat.usage is not None and chat.usage.completion_tokens > 0
    first = chat.choices[0]
    assert first.message.role == "assistant" and first.logprobs is not None
    assert len(first.logprobs.content) >= 1
    text = client.completions.create(model="default", prompt="1, 2, 3,", max_tokens=4, logprobs=1)
    assert len(text.choices) == 1 and text.choices[0].logprobs is not None
    assert len(text.choices[0].logprobs.token_logprobs) == len(text.choices[0].logprobs.tokens)
    # The alternatives asked for: greedy picks the most likely token, listed first of k, most likely first.
    greedy = client.chat.completions.create(
        model="default",
        messages=[{"role": "user", "content": "2 + 3"}],
        max_tokens=6,
        temperature=0,
        logprobs=True,
        top_logprobs=3,
    )
    content = greedy.choices[0].logprobs.content
    assert content and all(len(c.top_logprobs) == 3 for c in content)
    for c in content:
        assert c.top_logprobs[0].token == c.token
        assert [t.logprob for t in c.top_logprobs] == sorted((t.logprob for t in c.top_logprobs), reverse=True)
    two = client.completions.create(model="default", prompt="1, 2, 3,", max_tokens=3, temperature=0, logprobs=2)
    tops = two.choices[0].logprobs.top_logprobs
    assert tops is not None and len(tops) == len(two.choices[0].logprobs.tokens) and all(len(t) == 2 for t in tops)
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(
            model="default", messages=[{"role": "user", "content": "x"}], max_tokens=2, logprobs=True, top_logprobs=21
        )
    assert "between 0 and 20" in refused.value.response.text


def test_greedy_is_deterministic_and_max_tokens_holds(server: str) -> None:
    body = {
        "input_ids": [1, 4093, 198, 17, 1232, 216, 18, 2, 198, 1, 520, 9531, 198],
        "sampling_params": {"max_new_tokens": 5, "temperature": 0},
        "return_logprob": True,
    }
    a = httpx.post(f"{server}/generate", json=body, timeout=60).json()
    b = httpx.post(f"{server}/generate", json=body, timeout=60).json()
    assert a["output_ids"] == b["output_ids"] and 1 <= len(a["output_ids"]) <= 5
    assert a["meta_info"]["completion_tokens"] == len(a["meta_info"]["output_token_logprobs"])


def test_bad_requests_are_400_not_500(server: str) -> None:
    assert httpx.post(f"{server}/generate", json={"sampling_params": {}}, timeout=30).status_code == 400
    assert httpx.post(f"{server}/v1/completions", json={"prompt": "x", "n": 0}, timeout=30).status_code == 400
    assert httpx.get(f"{server}/health", timeout=5).json()["status"] == "ok"


def test_unknown_model_folder_is_a_clear_error(tmp_path: Path) -> None:
    import subprocess

    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "mcp_rl.trainer.serve_model",
            "--model",
            str(tmp_path / "nope"),
            "--port",
            str(free_port()),
        ],
        env=child_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 2
    assert "not a local Hugging Face model folder" in result.stderr
