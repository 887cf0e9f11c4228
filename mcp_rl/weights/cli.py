"""`mcp-rl export RUN_ID [--step N] [--format adapter|merged] [--dest DIR] [--push-to-hub REPO]
[--overwrite] [--timeout S] [--json]`: the same export as rl_export_weights, waited for in the
foreground up to a deadline (then it goes on in the background, and the answer says how to
collect it)."""

from __future__ import annotations

import argparse
import sys

import anyio

from mcp_rl import background
from mcp_rl.settings import Settings
from mcp_rl.weights import jobs
from mcp_rl.weights.jobs import ExportState

# A merged export of a large model and its push can take long; an export past this is left running.
DEFAULT_TIMEOUT_S = 3600.0
STILL_RUNNING = 3  # exit code: the deadline passed, the export goes on


def cmd_export(settings: Settings, args: argparse.Namespace) -> int:
    status = jobs.start(
        settings,
        args.run_id,
        step=args.step,
        format=args.format,
        dest=args.dest,
        push_to_hub=args.push_to_hub,
        overwrite=args.overwrite,
    )
    tinker = jobs.spec_of(settings, status.export_id).weights.startswith("tinker://")
    if tinker:
        print("Downloading from Tinker starts a short Tinker session on the base model.", file=sys.stderr)
    export_id = status.export_id
    phases: list[str] = []

    async def say_phase(read: jobs.ExportStatus) -> None:
        if read.phase and read.phase not in phases[-1:]:
            phases.append(read.phase)
            print(f"  {read.phase}", file=sys.stderr)

    status = anyio.run(
        background.wait_for_job,
        lambda: jobs.read_status(settings, export_id),
        lambda s: s.state == ExportState.RUNNING,
        args.timeout,
        say_phase,
    )
    status.message = jobs.describe(status, tinker)
    if status.state == ExportState.RUNNING:
        status.message = (
            f"Not done within --timeout {args.timeout:g} s; it goes on in the background. " + status.message
        )
    print(status.model_dump_json(indent=2) if args.json else status.message)
    if status.state == ExportState.RUNNING:
        return STILL_RUNNING
    return 0 if status.state == ExportState.DONE else 1
