"""`python -m mcp_rl.trainer --config runs/<id>/run.yaml`: one training run, then exit.

Exit status: 0 after the last step was trained and saved (or after a clean SIGTERM stop with a
checkpoint), 1 on any error (recorded in trainer_status.json), 2 on a bad command line/config.
Logs go to stderr; the supervisor points it at the run's logs/trainer.log.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from pathlib import Path

from mcp_rl.runconfig import RunConfig
from mcp_rl.trainer.process_setup import start_process


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mcp_rl.trainer", description="mcp-rl trainer")
    parser.add_argument("--config", required=True, type=Path, help="the run's run.yaml")
    args = parser.parse_args(argv)
    settings = start_process()
    if settings is None:
        return 2
    # One line per /batch poll would bury the step lines.
    logging.getLogger("httpx").setLevel(logging.WARNING)

    # After the variables above: the backends load torch, which reads them once, when it loads.
    from mcp_rl.trainer.backends import make_backend
    from mcp_rl.trainer.loop import Trainer

    try:
        config = RunConfig.load(args.config)
    except (OSError, ValueError) as exc:
        print(f"error: cannot read {args.config}: {exc}", file=sys.stderr)
        return 2
    trainer = Trainer(config, settings, make_backend)
    code = asyncio.run(trainer.run())
    # The outcome is on disk already. Leave without interpreter teardown: a daemon thread still
    # inside torch (an inference request in flight) would otherwise abort the exit (SIGABRT).
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    sys.exit(main())
