"""The start of every process that may load torch (the trainer, the smoke-test model server)."""

from __future__ import annotations

import logging
import os
import sys

from mcp_rl import redact
from mcp_rl.errors import UserError
from mcp_rl.settings import Settings


def start_process() -> Settings | None:
    """Settings, logging to stderr, and the variables torch reads once when it loads.

    Call before importing torch. Returns None after printing one line when a setting is bad.
    """
    try:
        settings = Settings.from_env()
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return None
    logging.basicConfig(
        level=settings.log_level,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    redact.install_log_filter()  # no key in a log (mcp_rl.redact)
    redact.scrub_std_streams()  # nor in a traceback or a library's print
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    # Idle OpenMP threads sleep instead of spinning on a shared CPU.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    return settings
