"""Training backends behind one interface (`base.TrainingBackend`): `local` (torch) and `tinker`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from mcp_rl.models import resolve_model

if TYPE_CHECKING:
    from mcp_rl.runconfig import RunConfig
    from mcp_rl.settings import Settings
    from mcp_rl.trainer.backends.base import TrainingBackend


def make_backend(config: RunConfig, settings: Settings) -> TrainingBackend:
    """The backend named by `trainer.backend`, built for this run (heavy imports happen here)."""
    t = config.trainer
    if t.backend == "local":
        # Per backend: the local one loads torch; a Tinker run never imports it.
        from mcp_rl.trainer.backends.local import LocalBackend, configure_torch_threads

        configure_torch_threads(settings.torch_threads)
        return LocalBackend(
            resolve_model(settings, t.base_model),
            lora_rank=t.lora_rank,
            seed=t.seed,
            checkpoints_dir=config.paths.checkpoints_dir,
            eval_threads=settings.torch_threads or None,
        )
    if t.backend == "tinker":
        # Per backend: the Tinker SDK only for a Tinker run.
        from mcp_rl.trainer.backends.tinker import TinkerBackend

        return TinkerBackend.from_settings(config, settings)
    raise ValueError(f"unknown backend {t.backend!r}")
