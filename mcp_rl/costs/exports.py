"""What exporting a run's weights (rl_export_weights) costs.

A local run's weights are on this machine: $0. A Tinker run's checkpoint is downloaded the way
the SDK's `tinker checkpoint download` does it (mcp_rl.weights.tinker_download): a short session
loads the checkpoint (no tokens prefilled, sampled or trained), saves it as a temporary external
checkpoint (at most EXPORT_TTL_S, deleted right after the download) and the files are fetched
from signed URLs. Tinker bills:
- checkpoint storage per GB-month ($0.10 per GB per month on Tinker's Models & Pricing page,
  2026-10-07, as transcribed by api-evangelist/thinking-machines; billed in GB-hours per the SDK's
  StorageBillingEvent): the temporary copy for at most an hour is what is estimated here;
- checkpoint operations are counted per checkpoint (the SDK's CheckpointBillingEvent), with no
  published price: Tinker's own billing API leaves `estimated_cost_usd` None for them. That part is
  "not priced", never $0.
No step of an export samples or trains, so its estimate is far below the confirmation threshold
(the 64 GB download bound held an hour: under $0.01): it is stated, not asked about.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

STORAGE_USD_PER_GB_MONTH = 0.10
HOURS_PER_MONTH = 720
STORAGE_SOURCE = (
    "checkpoint storage $0.10 per GB-month: Tinker's Models & Pricing page "
    "(https://tinker-docs.thinkingmachines.ai/tinker/models/models_and_pricing/), 2026-10-07, as transcribed in "
    "api-evangelist/thinking-machines plans/thinking-machines-plans-pricing.yml"
)


class ExportCost(BaseModel):
    label: str = Field("estimated", description="USD figures are estimates from Tinker's published storage rate.")
    free: bool
    tokens: int = Field(0, description="Tokens an export prefills, samples or trains: none.")
    usd_at_most: float | None = Field(
        None, description="The temporary checkpoint's storage, held at most an hour (None: its size is not known yet)."
    )
    summary: str


def storage_usd(size_bytes: int, hours: float) -> float:
    return size_bytes / 1e9 * STORAGE_USD_PER_GB_MONTH * hours / HOURS_PER_MONTH


def export_cost(tinker: bool, ttl_s: int, size_bytes: int | None = None) -> ExportCost:
    """Before the download (size None) or after it (the bytes fetched)."""
    if not tinker:
        return ExportCost(free=True, summary="$0: a local run's weights are on this machine (no paid service).")
    hours = ttl_s / 3600
    per_gb = storage_usd(1_000_000_000, hours)
    operation = (
        "plus one checkpoint save, which Tinker counts per checkpoint but publishes no price for (its billing API "
        "leaves estimated_cost_usd None for checkpoint operations): not priced here, not $0"
    )
    if size_bytes is None:
        text = (
            f"Estimated cost: no tokens are processed; the temporary Tinker checkpoint is stored at most {hours:g} h, "
            f"about ${per_gb:.6f} per GB of adapter ({STORAGE_SOURCE}), {operation}."
        )
        return ExportCost(free=False, summary=text)
    usd = storage_usd(size_bytes, hours)
    text = (
        f"Estimated cost: at most ${usd:.6f} for storing the temporary {size_bytes / 1e6:.1f} MB Tinker checkpoint up "
        f"to {hours:g} h ({STORAGE_SOURCE}); no tokens were processed; {operation}."
    )
    return ExportCost(free=False, usd_at_most=usd, summary=text)
