"""The export worker: `python -m mcp_rl.weights.worker <job_dir>` (started detached by
mcp_rl.weights.jobs). Reads spec.json, exports (downloading from Tinker first when the weights
are a tinker:// path), pushes to the Hub if asked, and writes status.json as it goes."""

from __future__ import annotations

import logging
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import psutil

from mcp_rl.costs.exports import export_cost
from mcp_rl.settings import Settings
from mcp_rl.weights.export import ExportSpec, export
from mcp_rl.weights.jobs import SPEC_FILE, STATUS_FILE, ExportState, ExportStatus, write_status

log = logging.getLogger("mcp_rl.weights.worker")


def run(job_dir: Path, settings: Settings) -> int:
    spec = ExportSpec.model_validate_json((job_dir / SPEC_FILE).read_text(encoding="utf-8"))
    status = ExportStatus.model_validate_json((job_dir / STATUS_FILE).read_text(encoding="utf-8"))
    status.pid, status.pid_started_at = os.getpid(), psutil.Process().create_time()

    def progress(phase: str) -> None:
        log.info("%s", phase)
        status.phase = phase
        write_status(job_dir, status)

    scratch: Path | None = None
    try:
        adapter = Path(spec.weights)
        if spec.weights.startswith("tinker://"):
            # mcp_rl.weights.tinker_download imports tinker only when called
            from mcp_rl.weights.tinker_download import EXPORT_TTL_S, download_checkpoint

            spec.dest.parent.mkdir(parents=True, exist_ok=True)
            scratch = Path(tempfile.mkdtemp(prefix=f".{spec.dest.name}.download-", dir=spec.dest.parent))
            size = download_checkpoint(settings, spec.weights, scratch, progress)
            status.cost = export_cost(True, EXPORT_TTL_S, size)
            adapter = scratch
        result, notes = export(spec, adapter, progress)
        status.notes = notes
        if spec.push_to_hub:
            # mcp_rl.weights.hub imports huggingface_hub only when called
            from mcp_rl.weights.hub import push

            progress(f"pushing to the Hugging Face Hub ({spec.push_to_hub}, private)")
            result.hub_url = push(settings, spec.dest, spec.push_to_hub)
        status.result = result
        status.state = ExportState.DONE
        status.phase = "done"
        return 0
    except Exception as exc:
        log.exception("export failed")
        status.state = ExportState.FAILED
        status.error = f"{type(exc).__name__}: {str(exc)[:500]}"
        return 1
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
        status.ended_at = time.time()
        write_status(job_dir, status)


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    return run(Path(sys.argv[1]), Settings.from_env())


if __name__ == "__main__":
    sys.exit(main())
