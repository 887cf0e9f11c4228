"""The test gateway between the children and the provider, driven by the real openai client
against the FAKE OpenRouter on loopback (no Atropos processes: the fast tier)."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager

import openai
import pytest

from mcp_rl.inference_test import gateway as gw
from mcp_rl.inference_test.gateway import Budgets, Gateway, Lane, preflight
from mcp_rl.model_specs import ModelSpec, model_slug
from tests.fakes.fake_openrouter import FakeOpenRouter

KEY = "sk-or-v1-FAKE-gateway"
QUESTION = [{"role": "user", "content": "What is 3 + 4? Answer with the number."}]


def _model(model_id: str, reasoning: dict | None = None, floor: int | None = None) -> ModelSpec:
    return ModelSpec(
        id=model_id,
        name=model_id,
        scale="s",
        provider="openrouter",
        slug=model_slug(model_id),
        reasoning=reasoning,
        min_max_tokens=floor,
    )


@contextmanager
def _through_gateway(
    fake: FakeOpenRouter,
    model: ModelSpec,
    requests: int = 20,
    tokens: int = 100_000,
    key: str = KEY,
    empty_limit: int = 4,
    upstream: str | None = None,
) -> Iterator[tuple[openai.OpenAI, Lane]]:
    gateway = Gateway().start()
    lane = Lane(
        model,
        upstream or fake.base_url,
        key,
        Budgets(requests, tokens),
        empty_limit=empty_limit,
        request_timeout_s=10,
        known_ids=fake.known_ids(),
        backoff_base_s=0.05,
    )
    gateway.add(lane)
    # What a child does: the real openai client with the gateway's token; no retries of its own here.
    client = openai.OpenAI(api_key=gateway.token, base_url=gateway.base_url(model.slug), max_retries=0, timeout=20)
    try:
        yield client, lane
    finally:
        client.close()
        gateway.stop()


def _ask(client: openai.OpenAI, model: ModelSpec, max_tokens: int = 8):
    return client.chat.completions.create(model=model.id, messages=QUESTION, max_tokens=max_tokens, n=4)


def test_a_reasoning_model_answers_through_the_gateway_but_not_without_it() -> None:
    model = _model("qwen/qwen3-8b", {"enabled": False}, floor=512)
    with FakeOpenRouter(api_key=KEY, behaviours={model.id: "reasoning"}) as fake:
        direct = openai.OpenAI(api_key=KEY, base_url=fake.base_url, max_retries=0)
        raw = _ask(direct, model)
        with _through_gateway(fake, model) as (client, lane):
            answer = _ask(client, model)
            usage = lane.snapshot()
    # As OpenRouter: n is ignored, and 8 tokens all go to reasoning.
    assert len(raw.choices) == 1 and raw.choices[0].message.content == ""
    assert raw.choices[0].finish_reason == "length" and raw.choices[0].message.reasoning
    # The fake answers every other request of a model right: this is its second.
    assert answer.choices[0].message.content == "8" and answer.choices[0].finish_reason == "stop"
    sent = fake.requests[-1].body
    assert sent["reasoning"] == {"enabled": False} and sent["max_tokens"] == 512 and sent["usage"] == {"include": True}
    assert fake.requests[-1].authorization == f"Bearer {KEY}"
    assert usage.requests == 1 and usage.answers == 1 and usage.empty_answers == 0
    assert usage.total_tokens == answer.usage.total_tokens > 0
    assert usage.cost_usd == pytest.approx(answer.usage.model_extra["cost"]) and usage.cost_usd > 0


def test_a_model_that_never_answers_stops_after_a_group_of_empty_answers() -> None:
    model = _model("fake/silent-model", {"effort": "low"}, floor=64)
    with (
        FakeOpenRouter(behaviours={model.id: "silent"}) as fake,
        _through_gateway(fake, model, requests=50) as (client, lane),
    ):
        for _ in range(10):
            try:
                _ask(client, model)
            except openai.APIStatusError as exc:
                assert exc.status_code == 402 and "every answer was empty" in exc.message
                break
        usage = lane.snapshot()
    assert lane.stop is not None and lane.stop.state == "failed"
    assert "max_tokens=64 on reasoning" in lane.stop.reason and "configs/test_models.yaml" in lane.stop.reason
    assert usage.requests == 4 and usage.empty_answers == 4 and usage.refused == 1
    assert len(fake.completions_for(model.id)) == 4


def test_request_budget_stops_the_model_and_nothing_more_reaches_the_provider() -> None:
    model = _model("fake/good-model")
    with FakeOpenRouter() as fake, _through_gateway(fake, model, requests=3) as (client, lane):
        for _ in range(3):
            _ask(client, model)
        for _ in range(5):  # a child that keeps asking gets the same answer, for free
            with pytest.raises(openai.APIStatusError) as refused:
                _ask(client, model)
        usage = lane.snapshot()
    assert refused.value.status_code == 402 and "request budget" in refused.value.message
    assert lane.stop is not None and lane.stop.state == "over_budget"
    assert usage.requests == 3 and usage.refused == 5
    assert len(fake.completions_for(model.id)) == 3


def test_token_budget_caps_max_tokens_then_stops() -> None:
    model = _model("fake/good-model")
    with FakeOpenRouter() as fake, _through_gateway(fake, model, tokens=40) as (client, lane):
        _ask(client, model, max_tokens=1000)
        assert fake.requests[-1].body["max_tokens"] == 40  # never more than the budget has left
        with pytest.raises(openai.APIStatusError):
            for _ in range(40):
                _ask(client, model, max_tokens=1000)
    assert lane.stop is not None and lane.stop.state == "over_budget" and "token budget" in lane.stop.reason
    assert lane.snapshot().total_tokens >= 40


@pytest.mark.parametrize(
    ("behaviour", "key", "model_id", "status", "words"),
    [
        ("ok", "sk-or-v1-WRONG", "fake/good-model", 401, "refused the key"),
        ("nocredits", KEY, "fake/broke-model", 402, "No credits left"),
        ("ok", KEY, "qwen/qwen3-8c", 400, "Unknown model id 'qwen/qwen3-8c'"),
        ("mandatory", KEY, "minimax/minimax-m2.7", 400, "refused the reasoning options"),
    ],
)
def test_fatal_provider_errors_become_one_line_with_the_fix(
    behaviour: str, key: str, model_id: str, status: int, words: str
) -> None:
    model = _model(model_id, {"enabled": False})
    catalog = ["fake/good-model", "fake/broke-model", "qwen/qwen3-8b", "qwen/qwen3-14b", "minimax/minimax-m2.7"]
    with FakeOpenRouter(api_key=KEY, behaviours={model_id: behaviour}, catalog=catalog) as fake:
        with _through_gateway(fake, model, key=key) as (client, lane):
            with pytest.raises(openai.APIStatusError) as first:
                _ask(client, model)
            with pytest.raises(openai.APIStatusError) as again:
                _ask(client, model)
            usage = lane.snapshot()
    assert first.value.status_code == status  # the provider's own answer reaches the child once
    assert again.value.status_code == 402 and usage.refused == 1  # then the model is stopped
    assert lane.stop is not None and lane.stop.state == "failed" and words in lane.stop.reason
    assert "Fix:" in lane.stop.reason and "\n" not in lane.stop.reason
    assert usage.requests == 1 and usage.errors == {str(status): 1}
    if status == 400 and "Unknown" in words:
        assert "qwen/qwen3-8b" in lane.stop.reason  # the closest ids are suggested


def test_429_waits_as_long_as_retry_after_says_then_answers() -> None:
    model = _model("fake/busy-model")
    with FakeOpenRouter(behaviours={model.id: "ratelimited"}, rate_limited_requests=2, retry_after_s=0.3) as fake:
        with _through_gateway(fake, model) as (client, lane):
            answer = _ask(client, model)
            usage = lane.snapshot()
            assert lane.stop is None
    times = [r.time for r in fake.completions_for(model.id)]
    assert answer.choices[0].message.content == "7"
    assert len(times) == 3 and usage.requests == 3 and usage.retries == 2 and usage.errors == {"429": 2}
    assert all(later - earlier >= 0.3 for earlier, later in zip(times, times[1:]))


def test_server_errors_back_off_exponentially_and_stop_the_model() -> None:
    model = _model("fake/broken-model")
    with (
        FakeOpenRouter(behaviours={model.id: "fail"}) as fake,
        _through_gateway(fake, model, requests=100) as (client, lane),
    ):
        started = time.monotonic()
        for _ in range(10):
            with pytest.raises(openai.APIStatusError):
                _ask(client, model)
            if lane.stop is not None:
                break
    times = [r.time for r in fake.completions_for(model.id)]
    gaps = [b - a for a, b in zip(times, times[1:])]
    assert lane.stop is not None and "failed (500" in lane.stop.reason and "retry later" in lane.stop.reason
    assert len(times) == gw.MAX_FAILURE_ROUNDS
    # Exponential with jitter in [0.5, 1]: each pause at least half of base * 2^k.
    assert all(gap >= 0.5 * 0.05 * 2**k for k, gap in enumerate(gaps))
    assert time.monotonic() - started < 10


def test_an_unreachable_provider_is_named_with_the_fix() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}/api/v1"
    model = _model("fake/good-model")
    with FakeOpenRouter() as fake, _through_gateway(fake, model, upstream=dead) as (client, lane):
        for _ in range(5):
            with pytest.raises(openai.APIStatusError) as exc:
                _ask(client, model)
            if lane.stop is not None:
                break
    assert exc.value.status_code in (402, 502)
    assert lane.stop is not None and lane.stop.reason.startswith("Cannot reach OpenRouter at " + dead)
    assert "OPENROUTER_BASE_URL" in lane.stop.reason


def test_preflight_checks_ids_and_key_before_any_paid_call() -> None:
    with FakeOpenRouter(api_key=KEY, catalog=["qwen/qwen3-8b", "z-ai/glm-4.7-flash", "minimax/minimax-m2.7"]) as fake:
        checked = preflight(fake.base_url, KEY, ["qwen/qwen3-8b", "z-ai/glm-4.7-flsh", "nobody/nothing"])
        wrong_key = preflight(fake.base_url, "sk-or-v1-WRONG", ["qwen/qwen3-8b"])
        paid = fake.completions_for("qwen/qwen3-8b")
    assert set(checked.causes) == {"z-ai/glm-4.7-flsh", "nobody/nothing"}
    assert "Closest ids: z-ai/glm-4.7-flash" in checked.causes["z-ai/glm-4.7-flsh"]
    assert (
        "Closest" not in checked.causes["nobody/nothing"]
        and "https://openrouter.ai/models" in checked.causes["nobody/nothing"]
    )
    assert "refused the key" in wrong_key.causes["qwen/qwen3-8b"]
    assert paid == []
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}/api/v1"
    unreachable = preflight(dead, KEY, ["qwen/qwen3-8b"])
    assert unreachable.causes["qwen/qwen3-8b"].startswith("Cannot reach OpenRouter")
    with FakeOpenRouter(api_key=KEY, key_limit_remaining=0.0) as fake:
        spent = preflight(fake.base_url, KEY, ["qwen/qwen3-8b"])
    assert "credit limit is used up" in spent.causes["qwen/qwen3-8b"] and "Fix:" in spent.causes["qwen/qwen3-8b"]


def test_the_gateway_wants_its_token() -> None:
    model = _model("fake/good-model")
    with FakeOpenRouter() as fake, _through_gateway(fake, model) as (client, lane):
        stranger = openai.OpenAI(api_key="guess", base_url=str(client.base_url), max_retries=0)
        with pytest.raises(openai.AuthenticationError):
            _ask(stranger, model)
    assert fake.requests == [] and lane.snapshot().requests == 0


def test_token_in_generation_reaches_a_local_server_root_and_is_refused_for_openrouter() -> None:
    """verifiers' TrainClient posts token ids to <base>/inference/v1/generate: a local model's
    server has it at its root (not under /v1); OpenRouter has no such route."""
    import json
    from http.server import BaseHTTPRequestHandler

    import httpx

    from tests.kit.loopback import LoopbackServer

    seen: list[str] = []

    class Upstream(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            seen.append(self.path)
            data = json.dumps({"choices": [{"token_ids": [7], "finish_reason": "length"}]}).encode()
            self.send_response(200 if self.path == "/inference/v1/generate" else 404)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = LoopbackServer("upstream", handler=Upstream).start()
    local = ModelSpec(id="local", name="local", scale="tiny", provider="local", slug="local")
    body = {"model": "local", "prompt": {"token_ids": [1, 2]}, "sampling_params": {"max_tokens": 1}}
    try:
        with FakeOpenRouter(api_key=KEY) as fake:
            with _through_gateway(fake, local, upstream=f"{server.base_url}/v1") as (
                client,
                lane,
            ):
                base = str(client.base_url).rstrip("/").removesuffix("/v1")
                auth = {"Authorization": f"Bearer {client.api_key}"}
                answer = httpx.post(f"{base}/inference/v1/generate", json=body, headers=auth, timeout=10)
                usage = lane.snapshot()
            assert answer.status_code == 200 and answer.json()["choices"][0]["token_ids"] == [7]
            assert seen == ["/inference/v1/generate"]
            # Cut at its limit but not empty: its tokens count as an answer (a lane stops after
            # a group of empty answers) and as its completion tokens.
            assert (usage.answers, usage.empty_answers, usage.completion_tokens) == (1, 0, 1)
            remote = _model("qwen/qwen3-8b")
            with _through_gateway(fake, remote) as (client, lane):
                base = str(client.base_url).rstrip("/").removesuffix("/v1")
                auth = {"Authorization": f"Bearer {client.api_key}"}
                refused = httpx.post(f"{base}/inference/v1/generate", json=body, headers=auth, timeout=10)
                assert lane.snapshot().requests == 0
            assert refused.status_code == 400 and "token-in" in refused.json()["error"]["message"]
            assert fake.requests == []
    finally:
        server.stop()
