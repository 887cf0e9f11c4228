"""The environment runner's start-up help: the prewarmed tokenizer is handed over, once."""

from __future__ import annotations

from typing import Any

from mcp_rl.environments.atropos_hooks import hand_over_once


class Auto:
    loads: list[tuple[Any, ...]] = []

    @classmethod
    def from_pretrained(cls, name: str, *args: Any, **kwargs: Any) -> object:
        cls.loads.append((name, args, tuple(kwargs)))
        return object()


def test_the_first_plain_load_of_the_same_name_gets_the_prewarmed_tokenizer_and_later_ones_load() -> None:
    prewarmed = object()
    hand_over_once(Auto, "org/tok", prewarmed)
    assert Auto.from_pretrained("org/tok", use_fast=False) is not prewarmed  # other options: a real load
    assert Auto.from_pretrained("other/tok") is not prewarmed
    assert Auto.from_pretrained("org/tok") is prewarmed
    second = Auto.from_pretrained("org/tok")
    assert second is not prewarmed  # never shared between two users
    assert [name for name, _, _ in Auto.loads] == ["org/tok", "other/tok", "org/tok"]
