"""reasoning-gym specs, configs and items (no model): mixtures by weight, dataset parameters,
held-out items from a seed range training never reaches and never trained on, the datasets'
own scoring, and the listing of every dataset with its parameters (slow ones said so)."""

from __future__ import annotations

import pytest

from mcp_rl.environments.rg_spec import held_out_counts, parse_spec


def test_specs_parse_to_normalised_weights() -> None:
    assert parse_spec("rg:countdown") == {"countdown": 1.0}
    assert parse_spec("a=3, b=1") == {"a": 0.75, "b": 0.25}
    for bad, words in (("rg:", "no dataset"), ("a=0", "must be > 0"), ("a=x", "not a number"), ("a,a", "twice")):
        with pytest.raises(ValueError, match=words):
            parse_spec(bad)


def test_held_out_items_split_by_weight_at_least_one_each() -> None:
    assert held_out_counts({"a": 0.75, "b": 0.25}, 10) == {"a": 8, "b": 2}
    assert held_out_counts({"a": 0.999, "b": 0.001}, 10) == {"a": 9, "b": 1}
    assert sum(held_out_counts({"a": 1 / 3, "b": 1 / 3, "c": 1 / 3}, 200).values()) == 200


def test_config_items_and_scores() -> None:
    pytest.importorskip("reasoning_gym")
    from mcp_rl.environments.bundled.reasoning_gym_env import ReasoningGymConfig, extract, make_datasets

    config = ReasoningGymConfig(
        datasets="rg:leg_counting=3,basic_arithmetic=1",
        params='{"leg_counting": {"max_animals": 4}}',
        train_size=500,
        held_out_size=40,
    )
    train, held = make_datasets(config)
    assert {n: len(d) for n, d in held.items()} == {"leg_counting": 30, "basic_arithmetic": 10}
    assert train["leg_counting"].config.max_animals == 4 and held["leg_counting"].config.max_animals == 4
    item = held["basic_arithmetic"][0]
    assert held["basic_arithmetic"].score_answer(extract(f"x <answer> {item['answer']} </answer>"), item) == 1.0
    assert held["basic_arithmetic"].score_answer(extract("no idea"), item) == 0.0
    with pytest.raises(ValueError, match="overlap the held-out seeds"):
        ReasoningGymConfig(seed=999_999_999, train_size=10)
    with pytest.raises(ValueError, match="not in the mixture: countdown"):
        ReasoningGymConfig(datasets="leg_counting", params='{"countdown": {}}')
    with pytest.raises(ValueError, match="JSON object of objects"):
        ReasoningGymConfig(params='{"countdown": 3}')


def test_every_dataset_is_listed_with_its_parameters() -> None:
    pytest.importorskip("reasoning_gym")
    from mcp_rl.environments.gem_catalog_child import reasoning_gym_entries

    entries = {e["id"]: e for e in reasoning_gym_entries()}
    assert len(entries) >= 100 and "rg:composite" not in entries
    countdown = entries["rg:countdown"]
    assert countdown["kwargs"]["min_numbers"] == 4 and "seed" not in countdown["kwargs"]
    assert "Slow to generate" in countdown["description"]
    assert "Slow to generate" not in entries["rg:leg_counting"]["description"]
