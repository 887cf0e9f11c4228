"""The export worker: `python -m mcp_rl.weights.worker --dir JOB_DIR` (started detached by
mcp_rl.weights.jobs). Reads spec.json, exports (downloading from Tinker first when the weights
are a tinker:// path), pushes to the Hub if asked, and writes status.json as it goes."""

from __future__ import annotations

import io
import logging
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import TextIO

import psutil

from mcp_rl.background import worker_main
from mcp_rl.costs.exports import export_cost
from mcp_rl.settings import Settings
from mcp_rl.weights.export import ExportSpec, existing_result, export
from mcp_rl.weights.hub import scrub
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
    secrets = _secrets(settings)
    try:
        adapter = Path(spec.weights)
        if spec.push_only:
            progress("the export is already there: pushing it as it is")
            result, notes = existing_result(spec), list[str]()
        else:
            if spec.weights.startswith("tinker://"):
                # mcp_rl.weights.tinker_download imports tinker only when called
                from mcp_rl.weights.tinker_download import EXPORT_TTL_S, download_checkpoint

                spec.dest.parent.mkdir(parents=True, exist_ok=True)
                # Named with our pid: if we die, the server finds and removes it (mcp_rl.weights.jobs).
                prefix = f".{spec.dest.name}.download-{os.getpid()}-"
                scratch = Path(tempfile.mkdtemp(prefix=prefix, dir=spec.dest.parent))
                size = download_checkpoint(settings, spec.weights, scratch, progress)
                status.cost = export_cost(True, EXPORT_TTL_S, size)
                adapter = scratch
            result, notes = export(spec, adapter, progress)
        status.notes = notes
        status.result = result  # complete at dest from here on, whatever the push does
        if spec.push_to_hub:
            # mcp_rl.weights.hub imports huggingface_hub only when called
            from mcp_rl.weights.hub import PushFailed, push

            progress(f"pushing to the Hugging Face Hub ({spec.push_to_hub}, private)")
            try:
                result.hub_url = push(settings, spec.dest, spec.push_to_hub)
            except PushFailed as exc:
                status.hub_repo_created = exc.created
                raise
        status.result = result
        status.state = ExportState.DONE
        status.phase = "done"
        return 0
    except Exception as exc:
        # The text of an error may echo a request (a Hub's body, a URL with a key): scrubbed.
        log.error("export failed: %s", scrub(f"{type(exc).__name__}: {exc}", *secrets))
        status.state = ExportState.FAILED
        status.error = scrub(f"{type(exc).__name__}: {str(exc)[:500]}", *secrets)
        return 1
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
        status.ended_at = time.time()
        write_status(job_dir, status)


def _secrets(settings: Settings) -> list[str]:
    found = [
        s.get_secret_value()
        for s in (settings.hf_token, settings.tinker_api_key, settings.wandb_api_key, settings.openrouter_api_key)
        if s is not None
    ]
    if settings.hf_token is None:
        try:  # the user's `hf auth login`, which a push uses when HF_TOKEN is not set
            # huggingface_hub: only when the token is not in the environment
            from huggingface_hub import get_token

            found.append(get_token() or "")
        except ImportError:
            pass
    return [s for s in found if s]


class _Scrubbed(io.TextIOBase):
    """A text stream that hides the secrets in what is written to it (the worker's log)."""

    def __init__(self, inner: TextIO, secrets: list[str]) -> None:
        self.inner = inner
        self._secrets = secrets

    def write(self, text: str) -> int:
        self.inner.write(scrub(text, *self._secrets))
        return len(text)

    def flush(self) -> None:
        self.inner.flush()


class ExportWorker:
    """The export as a job for `background.worker_main`."""

    # An export has no clean early end: a cancel's SIGTERM ends the process, and the server
    # removes what it left (mcp_rl.weights.jobs).
    stop = None

    def __init__(self, job_dir: Path, settings: Settings) -> None:
        self.job_dir, self.settings = job_dir, settings
        # Everything written to the log (ours, a library's warnings, a traceback) is scrubbed,
        # of the Hub login's token too, which no Settings holds.
        secrets = _secrets(settings)
        sys.stdout = _Scrubbed(sys.stdout, secrets)
        sys.stderr = _Scrubbed(sys.stderr, secrets)
        for handler in logging.getLogger().handlers:
            if isinstance(handler, logging.StreamHandler) and handler.stream is sys.stderr.inner:
                handler.setStream(sys.stderr)

    def run(self) -> str:
        return "done" if run(self.job_dir, self.settings) == 0 else "failed"


def main(argv: list[str] | None = None) -> int:
    # The checkpoint's lease and the destination's claim (--held-fd, inherited from the server,
    # mcp_rl.weights.jobs): released as soon as the last status is written.
    return worker_main(
        argv,
        module="mcp_rl.weights.worker",
        description=__doc__.splitlines()[0],
        make=ExportWorker,
        succeeded=("done",),
    )


if __name__ == "__main__":
    sys.exit(main())
