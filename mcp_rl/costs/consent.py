"""The yes before paid work. A paid start whose estimate is above the threshold
(MCP_RL_CONFIRM_ABOVE_USD) and that has no cost cap is refused with the estimate and the exact
call that accepts it; when the client can ask its person (MCP elicitation), the person is asked
instead, and anything but an explicit yes is a no. Free (local) work is never asked about."""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from mcp_rl.costs.estimate import Estimate, fmt
from mcp_rl.errors import UserError
from mcp_rl.runconfig import RunConfig
from mcp_rl.settings import Settings

Ask = Callable[[str], Awaitable[bool]]


def suggested_cap(estimate: Estimate) -> float:
    """A cap that lets the whole estimated run through: the high end, rounded up."""
    high = estimate.high() or 0.0
    if high <= 0:
        return 1.0
    digits = max(0, 1 - math.floor(math.log10(high)))
    return math.ceil(high * 10**digits) / 10**digits


@dataclass(frozen=True)
class Gate:
    """Whether a start needs a yes, and the words of the question (or the refusal)."""

    needs_yes: bool
    question: str = ""
    refusal: str = ""


def gate(
    settings: Settings, estimate: Estimate, cap: float | None, what: str, accept_call: str, unit: str = "step"
) -> Gate:
    if estimate.free:
        return Gate(False)
    if cap is not None:
        if not estimate.known:
            # A cap on an amount that cannot be priced cannot be enforced.
            raise UserError(
                f"Nothing was started: max_cost_usd is ${cap:g} but the cost of {what} cannot be estimated: "
                f"{estimate.problem}. Fix the pricing file (MCP_RL_PRICING_FILE) so the cap can be enforced."
            )
        first_step = estimate.step_usd.get("low")
        if first_step is not None and first_step > cap:
            # Even the cheapest first step would pass the cap: refuse rather than overspend once.
            raise UserError(
                f"Nothing was started: max_cost_usd ${cap:g} is less than one {unit} of {what} is estimated to cost "
                f"(${fmt(first_step)}-${fmt(estimate.step_usd.get('high'))} per {unit}; {estimate.summary()}). "
                f"Raise it, e.g. {accept_call.format(cap=f'{suggested_cap(estimate):g}')} for the whole run."
            )
        return Gate(False)
    high = estimate.high()
    threshold = settings.confirm_above_usd
    if high is not None and high <= threshold:
        return Gate(False)
    amount = f"${fmt(high)}"
    question = (
        f"{what} is paid work: {estimate.summary()} That is {'above' if high is not None else 'not known to be under'} "
        f"the ${threshold:g} asked about without a cap (MCP_RL_CONFIRM_ABOVE_USD). Start it without a cost cap?"
    )
    cap_hint = suggested_cap(estimate) if high is not None else None
    if cap_hint is not None:
        refusal = (
            f"Not started: {what} is estimated at {amount} at most ({estimate.summary()}), above the "
            f"${threshold:g} that needs a yes (MCP_RL_CONFIRM_ABOVE_USD), and no max_cost_usd is set. Nothing was "
            f"changed. Show the person this estimate; to accept it, set a cap: "
            f"{accept_call.format(cap=f'{cap_hint:g}')} (or a smaller amount: the work stops before passing it), "
            "then start again."
        )
    else:
        refusal = (
            f"Not started: {what} is paid work whose cost cannot be estimated ({estimate.summary()}), and no "
            "max_cost_usd is set. Nothing was changed. Add the model's rates to your pricing file "
            f"(MCP_RL_PRICING_FILE), then set a cap with {accept_call.format(cap='<USD>')} and start again."
        )
    return Gate(True, question=question, refusal=refusal)


async def require_yes(decision: Gate, ask: Ask | None) -> None:
    """Raise the refusal unless no yes is needed or the person said yes."""
    if not decision.needs_yes:
        return
    if ask is not None:
        try:
            if await ask(decision.question):
                return
        except Exception as exc:  # no answer (a timeout, a client error) is a no
            raise UserError(
                f"The person was asked and did not answer ({type(exc).__name__}). {decision.refusal}"
            ) from exc
        raise UserError(f"The person declined. {decision.refusal}")
    raise UserError(decision.refusal)


def training_gate(settings: Settings, config: RunConfig, estimate: Estimate) -> Gate:
    return gate(
        settings,
        estimate,
        config.trainer.max_cost_usd,
        f"Training {config.environment.name} on {config.trainer.backend} ({config.trainer.base_model})",
        'rl_edit_config("max_cost_usd", {cap})',
    )
