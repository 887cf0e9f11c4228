"""What generating MCP scenarios with an OpenRouter model is estimated to cost, before its first
request (mcp_rl.environments.mcp_family.scenarios does the work and meters it).

Per request: the prompt's tokens at most its characters / 2 (at least / 4), and the completion
between 40 % (low) and all (high) of the `max_tokens` asked. A "step" is one request: the cap is
checked before each. A model without a listed price is "unknown", never $0.
"""

from __future__ import annotations

from dataclasses import dataclass

from mcp_rl.costs.estimate import Estimate, fmt

LOW_COMPLETION_SHARE, EXPECTED_COMPLETION_SHARE = 0.4, 0.7


@dataclass
class ScenarioEstimate(Estimate):
    def summary(self) -> str:
        d = self.drivers
        what = (
            f"{d['scenarios']} scenarios from {d['model']} in {d['requests']} requests (prompts of up to "
            f"{d['prompt_tokens_high']} tokens, answers of up to {d['completion_tokens_high']} tokens each)"
        )
        if not self.known:
            return f"Estimated cost: unknown ({self.problem}). Drivers: {what}."
        run = self.run_usd
        return (
            f"Estimated cost: ${fmt(run['low'])}-${fmt(run['high'])} (expected ${fmt(run['expected'])}). "
            f"Drivers: {what}."
        )


def scenario_estimate(
    model: str,
    scenarios: int,
    requests: list[tuple[int, int]],
    price: tuple[float, float] | None,
    problem: str | None = None,
) -> ScenarioEstimate:
    """`requests`: (prompt tokens at most, completion tokens asked) of each request;
    `price`: USD per prompt and per completion token (None: unknown)."""
    drivers = {
        "model": model,
        "scenarios": scenarios,
        "requests": len(requests),
        "prompt_tokens_high": max((p for p, _ in requests), default=0),
        "completion_tokens_high": max((c for _, c in requests), default=0),
    }
    if price is None:
        return ScenarioEstimate(free=False, drivers=drivers, problem=problem or f"no price listed for {model}")
    prompt_usd, completion_usd = price

    def usd(prompt_share: float, completion_share: float) -> float:
        return sum(p * prompt_share * prompt_usd + c * completion_share * completion_usd for p, c in requests)

    first = requests[0] if requests else (0, 0)
    return ScenarioEstimate(
        free=False,
        drivers=drivers,
        step_usd={
            "low": first[0] * 0.5 * prompt_usd + first[1] * LOW_COMPLETION_SHARE * completion_usd,
            "expected": first[0] * 0.5 * prompt_usd + first[1] * EXPECTED_COMPLETION_SHARE * completion_usd,
            "high": first[0] * prompt_usd + first[1] * completion_usd,
        },
        run_usd={
            "low": usd(0.5, LOW_COMPLETION_SHARE),
            "expected": usd(0.5, EXPECTED_COMPLETION_SHARE),
            "high": usd(1.0, 1.0),
        },
        rates=f"{model}: ${prompt_usd * 1e6:g}/M prompt, ${completion_usd * 1e6:g}/M completion tokens (OpenRouter)",
    )
