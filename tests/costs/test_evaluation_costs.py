"""A paid checkpoint evaluation (rl_evaluate_checkpoint of a Tinker run, against OpenRouter
models) through a real MCP client, with the loopback Tinker (real tinker SDK in the detached
worker) and the loopback OpenRouter (real openai client) at the wire:

- its first answer states the estimate per model (tokens and USD, labelled estimated, drivers);
- above the threshold without a cap it is refused as an answer with the estimate and the exact
  call that accepts it, or the person is asked (decline: nothing starts, nothing is sampled);
- a cap below one chunk is refused; a cap stops it (state "stopped", cause in words) before the
  next chunk could pass it;
- after, its cost is the tokens the services received at the models' rates, and OpenRouter's
  reported usage.cost beside it."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, types

from mcp_rl.costs.evaluation import CHUNK_ITEMS
from mcp_rl.runconfig import RunConfig
from mcp_rl.server import build_server
from mcp_rl.settings import Settings
from tests.conftest import make_env
from tests.fakes.fake_openrouter import PRICE_PER_TOKEN_USD, FakeOpenRouter
from tests.fakes.tinker_server import API_KEY, TinkerServer, TinkerWire, write_tiny_tokenizer
from tests.kit.runs import record_checkpoint, write_run_file

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(300)]
BASE = "Qwen/Qwen3-4B-Instruct-2507"  # priced by the <= 4B size class of configs/pricing.yaml
OTHER = "fake/good-model"
CHECKPOINT = "run:t1@3"
# The run's held_out_limit: three chunks of items, so a cap can stop an evaluation after its first
# (201 items would only make every model answer twice as many).
HELD_OUT = 3 * CHUNK_ITEMS


def answering(action: str, asked: list[str]):
    async def callback(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action=action, content={"start": True} if action == "accept" else None)

    return callback


def setup_run(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tinker_url: str, openrouter_url: str, **extra: str
) -> tuple[Settings, RunConfig]:
    tokenizer = write_tiny_tokenizer(tmp_path / "tokenizer")
    env = dict(
        TINKER_API_KEY=API_KEY,
        TINKER_BASE_URL=tinker_url,
        OPENROUTER_API_KEY="sk-test",
        OPENROUTER_BASE_URL=openrouter_url,
        **extra,
    )
    for name, value in env.items():  # the detached worker inherits them, as from a server's env
        monkeypatch.setenv(name, value)
    settings = Settings.from_env(make_env(home, **env))
    config = write_run_file(
        settings, "t1", base_model=BASE, backend="tinker", tokenizer_path=tokenizer, held_out_limit=HELD_OUT
    )
    return settings, config


def sampler_path(server: TinkerServer) -> str:
    import tinker

    service = tinker.ServiceClient(base_url=server.base_url, api_key=API_KEY)
    training = service.create_lora_training_client(base_model=BASE, rank=8).result()
    return training.save_weights_for_sampler("step_000003").result().path


def evaluations(home: Path) -> list[Path]:
    folder = home / "evaluations"
    return sorted(folder.iterdir()) if folder.is_dir() else []


async def collect(client: Client, answer: dict[str, Any], deadline_s: float = 200) -> dict[str, Any]:
    deadline = time.monotonic() + deadline_s
    while answer["state"] == "running" and time.monotonic() < deadline:
        got = await client.call_tool("rl_get_evaluation", {"eval_id": answer["eval_id"], "wait_s": 20})
        assert not got.is_error, got.content
        answer = got.structured_content
    return answer


async def test_refused_with_the_estimate_or_asked_and_declined_nothing_sampled(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with TinkerServer(TinkerWire()) as tinker_fake, FakeOpenRouter(api_key="sk-test") as openrouter:
        # A $0 threshold: every paid evaluation needs a yes or a cap.
        settings, config = setup_run(
            home, tmp_path, monkeypatch, tinker_fake.base_url, openrouter.base_url, MCP_RL_CONFIRM_ABOVE_USD="0"
        )
        record_checkpoint(config, 3, "sampler", "tinker://t1/sampler_weights/step_000003", final=True)
        asked: list[str] = []
        call = {"run_id": "t1", "compare_with": [OTHER]}
        async with Client(build_server(settings)) as client:
            result = await client.call_tool("rl_evaluate_checkpoint", call)
            assert not result.is_error, result.content  # an answer, not an error
            refused = result.structured_content
            assert refused["state"] == "refused" and refused["eval_id"] == ""
            text = refused["message"]
            assert 'rl_evaluate_checkpoint(run_id="t1", step=3, compare_with=["fake/good-model"], max_cost_usd=' in text
            assert "Estimated cost: $" in text and "Nothing was changed" in text
            estimate = refused["estimated_cost"]
            assert estimate["label"] == "estimated" and not estimate["free"]
            assert estimate["drivers"]["items"] == HELD_OUT and estimate["drivers"]["max_tokens"] == 8
            assert estimate["drivers"]["models"] == [CHECKPOINT, f"base:{BASE}", OTHER]
            per_model = {m["model"]: m for m in estimate["per_model"]}
            for model in per_model.values():
                usd = model["usd"]
                assert 0 < usd["low"] < usd["expected"] < usd["high"], model
            # The OpenRouter model at OpenRouter's listed price: its high end is exactly its tokens at that price.
            high = per_model[OTHER]["tokens"]["high"]
            assert per_model[OTHER]["usd"]["high"] == pytest.approx(
                (high["prompt"] + high["completion"]) * PRICE_PER_TOKEN_USD
            )
            assert "APPROXIMATE Tinker rates" in per_model[CHECKPOINT]["rates"]
            assert "billing" in estimate["billing"] and "AdminClient.get_billing_usage" in estimate["billing"]
            # A cap below the cheapest chunk of items is refused with the estimate.
            tiny = await client.call_tool("rl_evaluate_checkpoint", {**call, "max_cost_usd": 1e-9})
            assert tiny.structured_content["state"] == "refused"
            assert f"less than one chunk of {CHUNK_ITEMS} items" in tiny.structured_content["message"]
            for bad in (0, -1, 1e7):
                bad_cap = await client.call_tool("rl_evaluate_checkpoint", {**call, "max_cost_usd": bad})
                assert bad_cap.is_error, bad
        async with Client(
            build_server(settings), elicitation_callback=answering("decline", asked), mode="legacy"
        ) as client:
            result = await client.call_tool("rl_evaluate_checkpoint", call)
            assert result.structured_content["state"] == "refused"
            assert "declined" in result.structured_content["message"]
            assert len(asked) == 1 and "Estimated cost: $" in asked[0] and CHECKPOINT in asked[0]
        assert evaluations(home) == []
        assert tinker_fake.wire.sampling_sessions == [] and tinker_fake.wire.samples == []
        assert openrouter.completions_for(OTHER) == []


async def test_cost_after_is_what_the_services_received_and_a_cap_stops_it(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wire = TinkerWire()
    with TinkerServer(wire) as tinker_fake, FakeOpenRouter(api_key="sk-test", reported_cost_factor=2.0) as openrouter:
        settings, config = setup_run(home, tmp_path, monkeypatch, tinker_fake.base_url, openrouter.base_url)
        wire.tokenizer_id = config.trainer.tokenizer_path
        record_checkpoint(config, 3, "sampler", sampler_path(tinker_fake), final=True)
        async with Client(build_server(settings)) as client:
            # Under the $5 threshold: started without a question; the estimate is in the first answer.
            first = await client.call_tool("rl_evaluate_checkpoint", {"run_id": "t1", "compare_with": [OTHER]})
            assert not first.is_error, first.content
            estimate = first.structured_content["estimated_cost"]
            assert estimate["label"] == "estimated" and estimate["evaluation_usd"]["high"] < 5
            done = await collect(client, first.structured_content)
            assert done["state"] == "completed", done["message"]
            samples = list(wire.samples)
            cost = done["cost"]
            by_model = {m["model"]: m for m in cost["models"]}
            # Tinker: the tokens the fake received and sampled, at the 4B class rates (USD per million).
            tinker_models = [by_model[CHECKPOINT], by_model[f"base:{BASE}"]]
            prompt = sum(m["prompt_tokens"] for m in tinker_models)
            sampled = sum(m["completion_tokens"] for m in tinker_models)
            assert prompt == sum(len(s["prompt"]) for s in samples) > 0
            assert sampled == sum(s["sampled_tokens"] for s in samples) > 0
            for m in tinker_models:
                assert m["estimated_usd"] == pytest.approx(
                    (m["prompt_tokens"] * 0.105 + m["completion_tokens"] * 0.33) / 1e6, rel=1e-6
                )
                assert m["reported_usd"] is None
            # OpenRouter: its reported usage.cost (twice the list price here), beside the estimate.
            other = by_model[OTHER]
            requests = openrouter.completions_for(OTHER)
            assert len(requests) == done["items"] == HELD_OUT
            assert all(r.body.get("usage") == {"include": True} for r in requests)
            assert other["estimated_usd"] == pytest.approx(
                (other["prompt_tokens"] + other["completion_tokens"]) * PRICE_PER_TOKEN_USD
            )
            assert other["reported_usd"] == pytest.approx(2 * other["estimated_usd"], rel=1e-4)
            assert cost["reported_usd"] == pytest.approx(other["reported_usd"])
            assert "estimated $" in cost["summary"] and "reported by OpenRouter $" in cost["summary"]
            per_model = {m["model"]: m for m in estimate["per_model"]}
            for name, m in by_model.items():
                print(
                    f"{name}: estimated before ${per_model[name]['usd']['low']:.6f}-${per_model[name]['usd']['high']:.6f} "
                    f"(expected ${per_model[name]['usd']['expected']:.6f}); metered ${m['estimated_usd']:.6f}"
                    + (f", reported ${m['reported_usd']:.6f}" if m["reported_usd"] is not None else "")
                )

            # A cap that lets exactly one chunk of the checkpoint's items through at their most.
            item_high = per_model[CHECKPOINT]["usd"]["high"] / estimate["drivers"]["items"]
            cap = item_high * CHUNK_ITEMS * 1.001
            before = len(wire.samples)
            capped = await client.call_tool("rl_evaluate_checkpoint", {"run_id": "t1", "max_cost_usd": cap})
            assert capped.structured_content["state"] in ("running", "stopped"), capped.content
            stopped = await collect(client, capped.structured_content)
            assert stopped["state"] == "stopped", stopped["message"]
            assert "cost cap reached at $" in stopped["message"] and f"max_cost_usd ${cap:g}" in stopped["message"]
            assert len(wire.samples) - before == CHUNK_ITEMS  # one chunk sampled, then stopped
            assert stopped["models"][0]["state"] == "failed" and "cost cap" in stopped["models"][0]["error"]
            assert stopped["models"][1]["state"] == "pending"
            assert stopped["cost"]["spent_usd"] <= cap and stopped["cost"]["max_cost_usd"] == cap
