"""The MCP side of the yes before paid work (mcp_rl.costs.consent): ask the person through the
client's elicitation when it declares it; otherwise the refusal says what accepts the estimate."""

from __future__ import annotations

from typing import Any

import anyio
from mcp.server.mcpserver import Context
from pydantic import BaseModel, Field

from mcp_rl.config.training_cost import preview
from mcp_rl.costs.consent import Ask, Gate, require_yes, training_gate
from mcp_rl.settings import Settings

# How long the person has to answer; no answer is a no.
ASK_TIMEOUT_S = 120.0


class PaidStartAnswer(BaseModel):
    start: bool = Field(description="Yes: start this paid work without a cost cap.")


def asker(ctx: Context, timeout_s: float) -> Ask | None:
    """An `Ask` through the client's form elicitation, or None when the client declares none."""
    capabilities = ctx.client_capabilities
    elicitation = capabilities.elicitation if capabilities is not None else None
    # A bare `elicitation: {}` counts as form support; url-only does not.
    if elicitation is None or (elicitation.form is None and elicitation.url is not None):
        return None

    async def ask(question: str) -> bool:
        with anyio.fail_after(timeout_s):
            result = await ctx.elicit(question, PaidStartAnswer)
        return result.action == "accept" and bool(getattr(result.data, "start", False))

    return ask


async def confirm_training_start(ctx: Context, settings: Settings, environments: Any, budget_s: float) -> Gate | None:
    """Refuse (UserError) a paid start above the threshold without a cap, unless the person says
    yes; the gate when one was needed and granted, else None. Changes nothing."""

    def decide() -> Gate | None:
        session, spec = environments.selected()
        config, estimate, _ = preview(settings, session, spec)
        if config is None or estimate is None:
            return None  # the start itself says what is wrong with the config
        return training_gate(settings, config, estimate)

    decision = await anyio.to_thread.run_sync(decide)
    if decision is None or not decision.needs_yes:
        return None
    await require_yes(decision, asker(ctx, min(ASK_TIMEOUT_S, max(1.0, budget_s - 5))))
    return decision
