"""Rates and estimates: the packaged table, the user's file over it, and a table that cannot
price the run's model, which makes the estimate "unknown" (never $0)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mcp_rl.costs.estimate import RunShape, estimate_run
from mcp_rl.costs.rates import tinker_rates
from mcp_rl.settings import Settings


def settings(tmp_path: Path, pricing: str | None = None) -> Settings:
    env = {"MCP_RL_HOME": str(tmp_path / "home")}
    if pricing is not None:
        path = tmp_path / "mine.yaml"
        path.write_text(pricing)
        env["MCP_RL_PRICING_FILE"] = str(path)
    return Settings.from_env(env)


SHAPE = RunShape(
    backend="tinker",
    model="Qwen/Qwen3-8B",
    steps=10,
    batch_size=8,
    group_size=4,
    max_tokens=100,
    max_sequence=1000,
    eval_every=0,
    prompt_tokens=(10, 50),
)


def test_the_packaged_rates_carry_a_date_and_source(tmp_path: Path) -> None:
    rates = tinker_rates(settings(tmp_path), "Qwen/Qwen3-8B").rates
    assert rates is not None and rates.exact and rates.date == "2026-10-07" and "tinker-docs" in rates.source
    assert rates.cached_prefill < rates.prefill
    # A model not listed gets its size class, marked as an approximation.
    small = tinker_rates(settings(tmp_path), "Qwen/Qwen3-4B-Instruct-2507").rates
    assert small is not None and not small.exact and "APPROXIMATE" in small.describe()


def test_the_users_file_is_read_over_the_packaged_one(tmp_path: Path) -> None:
    mine = "tinker:\n  models:\n    Qwen/Qwen3-8B: {prefill: 1, sample: 2, train: 3, date: '2026-11-01', source: me}\n"
    rates = tinker_rates(settings(tmp_path, mine), "Qwen/Qwen3-8B").rates
    assert rates is not None and (rates.prefill, rates.cached_prefill, rates.sample, rates.train) == (1, 1, 2, 3)
    high = estimate_run(SHAPE, tinker_rates(settings(tmp_path, mine), "Qwen/Qwen3-8B")).run_usd["high"]
    # 10 steps x (2 groups x 50 prefill + 8 x 100 sampled + 8 x 150 trained) + 2 evaluations of 8 x (50 + 100).
    assert high == pytest.approx((10 * (2 * 50 * 1 + 800 * 2 + 1200 * 3) + 2 * (400 * 1 + 800 * 2)) / 1e6)


@pytest.mark.parametrize(
    ("pricing", "model", "words"),
    [
        ("tinker: [unclosed", "Qwen/Qwen3-8B", "does not parse"),
        ("tinker:\n  models:\n    Qwen/Qwen3-8B: {prefill: .nan, sample: 1, train: 1}\n", "Qwen/Qwen3-8B", "prefill"),
        ("tinker:\n  sizes: []\n", "Qwen/Qwen3-4B", "no Tinker rate"),
        (None, "moonshotai/Kimi-K2-Thinking", "no Tinker rate"),
    ],
)
def test_a_table_that_cannot_price_the_model_makes_the_estimate_unknown(
    tmp_path: Path, pricing: str | None, model: str, words: str
) -> None:
    lookup = tinker_rates(settings(tmp_path, pricing), model)
    assert lookup.rates is None and words in (lookup.problem or "")
    estimate = estimate_run(RunShape(**{**SHAPE.__dict__, "model": model}), lookup)
    assert not estimate.known and estimate.high() is None
    assert "unknown" in estimate.summary() and words in estimate.summary()
    assert "$0" not in estimate.summary()


def test_a_local_run_is_free(tmp_path: Path) -> None:
    estimate = estimate_run(RunShape(**{**SHAPE.__dict__, "backend": "local"}), None)
    assert estimate.free and estimate.high() == 0.0 and estimate.summary().startswith("$0")


def test_an_unpriced_paid_start_needs_a_yes_and_a_cap_on_it_cannot_be_enforced(tmp_path: Path) -> None:
    from mcp_rl.costs.consent import gate
    from mcp_rl.errors import UserError

    model = "moonshotai/Kimi-K2-Thinking"
    estimate = estimate_run(RunShape(**{**SHAPE.__dict__, "model": model}), tinker_rates(settings(tmp_path), model))
    decision = gate(settings(tmp_path), estimate, None, "Training x", 'rl_edit_config("max_cost_usd", {cap})')
    assert (
        decision.needs_yes and "cannot be estimated" in decision.refusal and "MCP_RL_PRICING_FILE" in decision.refusal
    )
    with pytest.raises(UserError, match="cannot be estimated"):
        gate(settings(tmp_path), estimate, 10.0, "Training x", 'rl_edit_config("max_cost_usd", {cap})')
    # Priced and under the threshold: no yes needed.
    cheap = estimate_run(SHAPE, tinker_rates(settings(tmp_path), "Qwen/Qwen3-8B"))
    assert not gate(settings(tmp_path), cheap, None, "Training x", "{cap}").needs_yes


@pytest.mark.parametrize(
    ("base_url", "billed"),
    [
        ("http://127.0.0.1:8000", False),  # SkyRL's Tinker API, TuFT: a server of the user's
        ("https://tinker.example.org/api", False),
        ("https://tinker.thinkingmachines.dev/services/tinker-prod", True),  # hosted Tinker by its URL
        # Hosted Tinker in any spelling is hosted and priced (issue 43 item 2), never "$0, self-hosted".
        ("https://TINKER.THINKINGMACHINES.DEV/services/tinker-prod", True),
        ("https://tinker.thinkingmachines.dev./services/tinker-prod", True),
        ("https://Tinker.ThinkingMachines.Dev.:443/services/tinker-prod", True),
        (None, True),
    ],
)
def test_a_run_on_a_self_hosted_tinker_server_has_no_tinker_bill(
    tmp_path: Path, base_url: str | None, billed: bool
) -> None:
    from types import SimpleNamespace

    from mcp_rl.config.training_cost import estimate_training
    from mcp_rl.costs.consent import gate
    from mcp_rl.costs.meter import TokenMeter
    from mcp_rl.costs.tracker import tracker_for
    from tests.kit.runs import run_config

    # A model no pricing file knows: hosted Tinker's run cannot be priced, a self-hosted one needs no price.
    config = run_config(
        tmp_path / "run", backend="tinker", base_model="/models/SmolLM2-135M-Instruct", tinker_base_url=base_url
    )
    estimate = estimate_training(settings(tmp_path), config)
    decision = gate(settings(tmp_path), estimate, None, "Training x", "{cap}")
    tracker = tracker_for(SimpleNamespace(meter=TokenMeter()), config, settings(tmp_path))
    if billed:
        assert not estimate.known and decision.needs_yes and tracker.lookup is not None
    else:
        assert estimate.free and estimate.high() == 0.0 and not decision.needs_yes and tracker.lookup is None
        assert estimate.summary() == (
            f"$0 from Tinker: the run trains on the self-hosted Tinker-compatible server at {base_url} "
            "(its hardware is its owner's to count)."
        )
