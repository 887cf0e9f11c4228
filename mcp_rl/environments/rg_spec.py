"""reasoning-gym selection specs (stdlib only: the server parses them, the environment uses them):
`rg:<dataset>` or a weighted mixture `rg:<a>=<weight>,<b>=<weight>`."""

from __future__ import annotations

import json

PREFIX = "rg:"


def parse_spec(spec: str) -> dict[str, float]:
    """`countdown`, `rg:countdown`, or `a=0.7,b=0.3` (weights > 0, normalised) -> {dataset: weight}.
    Raises ValueError naming what is wrong."""
    text = spec.strip().removeprefix(PREFIX).strip()
    if not text:
        raise ValueError("no dataset named: give rg:<dataset> or rg:<a>=<weight>,<b>=<weight>")
    weights: dict[str, float] = {}
    for part in text.split(","):
        name, _, raw = part.strip().partition("=")
        name = name.strip()
        if not name:
            raise ValueError(f"empty dataset name in {spec!r}")
        try:
            weight = float(raw) if raw.strip() else 1.0
        except ValueError:
            raise ValueError(f"weight {raw!r} of {name!r} is not a number") from None
        if not weight > 0:
            raise ValueError(f"weight of {name!r} must be > 0 (got {raw})")
        if name in weights:
            raise ValueError(f"{name!r} appears twice in {spec!r}")
        weights[name] = weight
    total = sum(weights.values())
    return {name: w / total for name, w in weights.items()}


def held_out_counts(weights: dict[str, float], size: int) -> dict[str, int]:
    """`size` held-out items split by weight, at least one per dataset (largest remainders)."""
    names = list(weights)
    size = max(size, len(names))
    raw = {n: weights[n] * size for n in names}
    counts = {n: max(1, int(raw[n])) for n in names}
    for n in sorted(names, key=lambda n: raw[n] - int(raw[n]), reverse=True):
        if sum(counts.values()) >= size:
            break
        counts[n] += 1
    return counts


def describe(spec: str) -> str:
    """One line for a selected spec (listing and selection)."""
    weights = parse_spec(spec)
    if len(weights) == 1:
        return f"reasoning-gym dataset {next(iter(weights))}"
    return "reasoning-gym mixture " + json.dumps({k: round(v, 3) for k, v in weights.items()})
