"""Tinker's rates: configs/pricing.yaml, read under the user's own file (MCP_RL_PRICING_FILE).

A rate table that cannot be read, or that has no rate for the run's model, is never a price of
zero: the lookup carries the reason in words and every estimate built on it says "unknown".
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from mcp_rl.settings import Settings, configs_dir

PRICING_FILE = "pricing.yaml"
RATE_FIELDS = ("prefill", "cached_prefill", "sample", "train")
# "8B", "30B-A3B" (total 30), "1.5B": the model's parameter count in billions.
PARAMS = re.compile(r"(?<![A-Za-z0-9.])(\d+(?:\.\d+)?)B(?![A-Za-z])", re.IGNORECASE)


@dataclass(frozen=True)
class TinkerRates:
    """USD per million tokens for one model, with where the figures come from."""

    matched: str  # the model entry or size class the rates were taken from
    prefill: float
    cached_prefill: float
    sample: float
    train: float
    date: str
    source: str
    exact: bool  # False: an approximation, not the published figure for this model

    def describe(self) -> str:
        kind = "published" if self.exact else "APPROXIMATE"
        return (
            f"{kind} Tinker rates for {self.matched} (USD per million tokens: prefill {self.prefill:g}, cached "
            f"prefill {self.cached_prefill:g}, sample {self.sample:g}, train {self.train:g}; {self.date}; "
            f"{self.source})"
        )


@dataclass(frozen=True)
class RatesLookup:
    rates: TinkerRates | None
    problem: str | None = None  # why there are no rates, in words


class PricingError(ValueError):
    pass


def _rates(name: str, entry: Any, where: str) -> TinkerRates:
    if not isinstance(entry, dict):
        raise PricingError(f"{where}: the entry {name!r} is not a mapping of rates")
    values: dict[str, float] = {}
    for field in RATE_FIELDS:
        raw = entry.get(field)
        if field == "cached_prefill" and raw is None:
            raw = entry.get("prefill")
        if isinstance(raw, bool) or not isinstance(raw, int | float) or not math.isfinite(raw) or raw < 0:
            raise PricingError(
                f"{where}: {name!r} has no usable {field} rate (got {raw!r}; a finite number >= 0 of USD per "
                "million tokens)"
            )
        values[field] = float(raw)
    return TinkerRates(
        matched=name,
        date=str(entry.get("date") or "undated"),
        source=str(entry.get("source") or f"no source given in {where}"),
        exact=bool(entry.get("exact", False)),
        **values,
    )


def _read(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise PricingError(f"the pricing file {path} does not exist") from None
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        first = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        raise PricingError(f"the pricing file {path} does not parse as YAML ({first})") from None
    if data is None:
        return {}
    if not isinstance(data, dict) or not isinstance(data.get("tinker", {}), dict):
        raise PricingError(f"the pricing file {path} is not a mapping with a `tinker:` section")
    return data


@dataclass(frozen=True)
class PricingTable:
    models: dict[str, TinkerRates]
    sizes: list[tuple[float, TinkerRates]]  # (max parameters in billions, rates), ascending
    files: tuple[str, ...]

    def lookup(self, model: str) -> RatesLookup:
        if model in self.models:
            return RatesLookup(self.models[model])
        match = PARAMS.search(model.rsplit("/", 1)[-1])
        if match is None:
            return RatesLookup(
                None,
                f"no Tinker rate for {model!r} in {', '.join(self.files)}, and its name gives no parameter count "
                '("<N>B") to pick a size class: add it under tinker.models in your pricing file '
                "(MCP_RL_PRICING_FILE)",
            )
        size = float(match.group(1))
        for limit, rates in self.sizes:
            if size <= limit:
                return RatesLookup(rates)
        return RatesLookup(
            None,
            f"no Tinker rate for {model!r} ({size:g}B parameters) in {', '.join(self.files)}: add it under "
            "tinker.models in your pricing file (MCP_RL_PRICING_FILE)",
        )


def load_table(settings: Settings) -> PricingTable:
    """The packaged table with the user's file read over it; PricingError says what is wrong."""
    files = [configs_dir() / PRICING_FILE]
    if settings.pricing_file is not None:
        files.append(settings.pricing_file)
    models: dict[str, TinkerRates] = {}
    sizes: list[tuple[float, TinkerRates]] = []
    for path in files:
        section = _read(path).get("tinker") or {}
        for name, entry in (section.get("models") or {}).items():
            models[str(name)] = _rates(str(name), entry, str(path))
        if "sizes" in section:
            new: list[tuple[float, TinkerRates]] = []
            for i, entry in enumerate(section.get("sizes") or []):
                limit = entry.get("max_params_b") if isinstance(entry, dict) else None
                if isinstance(limit, bool) or not isinstance(limit, int | float) or not limit > 0:
                    raise PricingError(f"{path}: tinker.sizes[{i}] needs max_params_b (a number > 0)")
                new.append((float(limit), _rates(f"models up to {limit:g}B", entry, str(path))))
            sizes = sorted(new, key=lambda item: item[0])
    return PricingTable(models=models, sizes=sizes, files=tuple(str(f) for f in files))


def tinker_rates(settings: Settings, model: str) -> RatesLookup:
    try:
        return load_table(settings).lookup(model)
    except PricingError as exc:
        return RatesLookup(None, str(exc))
