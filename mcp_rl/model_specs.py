"""One model as smoke tests, evaluations and the cost estimates see it: its id, provider, slug
and budgets (`ModelSpec`). A base module of the services: smoke tests (mcp_rl.inference_test)
run models by it, costs (mcp_rl.costs) price them, evaluations name their folders by its slug."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Provider = Literal["openrouter", "local"]


def model_slug(model_id: str) -> str:
    """A folder name and resource key for a model id (`qwen/qwen3-8b` -> `qwen_qwen3-8b`)."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", model_id).strip("._-") or "model"
    return slug[:128]


class ModelSpec(BaseModel):
    """One model of a test as the worker needs it."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(description='OpenRouter model id, or "local" for the embedded default model.')
    name: str
    scale: str
    provider: Provider
    slug: str
    # How the test's gateway treats this model's requests (configs/test_models.yaml).
    reasoning: dict[str, Any] | None = Field(
        default=None, description="OpenRouter `reasoning` request options added to every request (remote models)."
    )
    min_max_tokens: int | None = Field(
        default=None, description="max_tokens is raised to at least this (remote models)."
    )
    request_budget: int | None = Field(default=None, description="Most requests this model may make in the test.")
    token_budget: int | None = Field(default=None, description="Most tokens (prompt + completion) this model may use.")
    # mcp_rl.costs.openrouter: stated before the first paid request (None: unknown, never 0).
    estimated_max_usd: float | None = Field(
        default=None, description="Estimated USD this model may spend at most (its token budget at its price)."
    )
    price_note: str | None = Field(default=None, description="How the estimate was made, or why it is unknown.")
    # A run's saved checkpoint (id run:<run_id>@<step>): served locally as base + this adapter.
    adapter: str | None = Field(default=None, description="The checkpoint's LoRA adapter folder (run checkpoints).")
    base_model: str | None = Field(default=None, description="The checkpoint's base model folder (run checkpoints).")

    @property
    def server_key(self) -> str:
        """Models with the same key share one local model server."""
        return f"{self.base_model or ''}|{self.adapter or ''}"
