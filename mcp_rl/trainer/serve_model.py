"""`python -m mcp_rl.trainer.serve_model --model default --port N [--adapter DIR]`: serve a model, no training.

Same endpoints and code as the trainer's inference server (`/health`, `/generate`,
`/v1/completions`, `/v1/chat/completions`, `/v1/models`). It stands in for OpenRouter in
smoke tests of environments, so nothing paid or remote is needed. Binds 127.0.0.1 unless told
otherwise; stops on SIGTERM/SIGINT. With `--adapter` it serves a run's saved checkpoint (base + its
LoRA adapter; `mcp-rl serve-model`, evaluations and `rl_test_inference(models=["run:<id>"])`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import uvicorn

from mcp_rl.errors import UserError
from mcp_rl.models import resolve_model
from mcp_rl.trainer.process_setup import start_process


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mcp_rl.trainer.serve_model", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--model", default="default", help='"default" (embedded SmolLM2-135M-Instruct) or a local HF folder'
    )
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--served-name", default=None, help="the `model` name reported (default: the folder name)")
    parser.add_argument(
        "--adapter",
        default=None,
        help="a saved checkpoint's PEFT adapter folder, merged into the model (a trained run)",
    )
    args = parser.parse_args(argv)
    settings = start_process()
    if settings is None:
        return 2

    # After the variables above: the local backend loads torch, which reads them once, when it loads.
    from mcp_rl.trainer.backends.local import LocalBackend, configure_torch_threads
    from mcp_rl.trainer.batcher import batching_sampler
    from mcp_rl.trainer.inference_server import InferenceService, build_app

    try:
        model_dir = resolve_model(settings, args.model)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    configure_torch_threads(settings.torch_threads)
    backend = LocalBackend(
        model_dir, train=False, seed=args.seed, adapter_dir=Path(args.adapter) if args.adapter else None
    )
    if args.served_name:
        backend.model_name = args.served_name
    # As in a run: requests that arrive together (a smoke test's parallel groups) are one batch.
    sampler = batching_sampler(backend, settings)
    # With a served name (a checkpoint, mcp-rl serve-model) requests for any other model are refused.
    service = InferenceService(sampler, only_model=args.served_name)
    app = build_app(service, sampling_concurrency=sampler.max_requests)
    # uvicorn in the main thread handles SIGTERM/SIGINT itself and exits cleanly.
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning", access_log=False, lifespan="off")
    return 0


if __name__ == "__main__":
    sys.exit(main())
