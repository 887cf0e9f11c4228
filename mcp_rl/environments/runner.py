"""Launcher of an environment process: `serve` in a run, `process` in smoke tests.

    python -m mcp_rl.environments.runner ENV_FILE CLASS_NAME [--project-root DIR]
        [--start-when FILE] MODE [ARGS...]

MODE and ARGS are the environment's own Atropos CLI (`serve --config run.yaml`,
`process --env.total_steps 3 ...`). The file is imported under a private module name (never
`__main__`, so its own `cli()` call at the bottom does not fire) with its project root on
sys.path and as the working directory; then the class's `cli()` runs with these arguments.

With --start-when, the environment is imported first and MODE starts only once FILE exists: the
supervisor starts an environment's (slow) imports while the trainer loads, and creates FILE
when the trainer is ready, so `serve` still begins strictly after it.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from mcp_rl.environments.loader import load_env_class

# Options of the Atropos CLI whose value is a path: resolved before we change directory.
_PATH_OPTIONS = ("--config",)
# An environment held back longer than this gives up (its supervisor is gone).
START_WHEN_TIMEOUT_S = 3600.0


def _absolute_paths(args: list[str]) -> list[str]:
    out = list(args)
    for i, arg in enumerate(out):
        for option in _PATH_OPTIONS:
            if arg == option and i + 1 < len(out):
                out[i + 1] = str(Path(out[i + 1]).resolve())
            elif arg.startswith(option + "="):
                out[i] = f"{option}={Path(arg.split('=', 1)[1]).resolve()}"
    return out


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m mcp_rl.environments.runner", description=__doc__)
    parser.add_argument("env_file", type=Path)
    parser.add_argument("class_name")
    parser.add_argument("--project-root", type=Path, default=None, help="default: the file's folder")
    parser.add_argument("--start-when", type=Path, default=None, help="import now, run MODE once this file exists")
    parser.add_argument("mode", choices=["serve", "process", "evaluate"])
    parser.add_argument("args", nargs=argparse.REMAINDER, help="passed to the environment's CLI")
    return parser


def main(argv: list[str] | None = None) -> int:
    ns = build_parser().parse_args(argv)
    env_file = ns.env_file.resolve()
    project_root = (ns.project_root or env_file.parent).resolve()
    env_args = _absolute_paths(ns.args)
    start_when = ns.start_when.resolve() if ns.start_when else None
    cls = load_env_class(env_file, ns.class_name, project_root)
    if start_when is not None:
        _prewarm(env_args)
    if start_when is not None and not _wait_for(start_when, START_WHEN_TIMEOUT_S):
        print(f"gave up waiting for {start_when} after {START_WHEN_TIMEOUT_S:g} s", file=sys.stderr)
        return 1
    # Metrics hook (mcp_rl.metrics): what the environment logs also goes to the run dir, not only W&B.
    from mcp_rl.metrics.env_metrics import install_for_run

    install_for_run(ns.mode, env_args)
    # Atropos's CLI reads sys.argv; argv[0] names the file for its help and error messages.
    sys.argv = [str(env_file), ns.mode, *env_args]
    cls.cli()  # run_and_exit: raises SystemExit with the environment's exit code
    return 0


def _prewarm(env_args: list[str]) -> None:
    """Load the run's tokenizer once while held: every Atropos environment does so first when it
    starts, and transformers imports most of itself lazily on that first load (seconds)."""
    config = next((env_args[i + 1] for i, a in enumerate(env_args[:-1]) if a == "--config"), None)
    if config is None:
        return
    try:
        import yaml
        from transformers import AutoTokenizer

        with open(config, encoding="utf-8") as fh:
            name = (yaml.safe_load(fh).get("env") or {}).get("tokenizer_name")
        if name:
            AutoTokenizer.from_pretrained(name)
    except Exception as exc:  # only a head start: the environment reports real problems itself
        print(f"prewarm skipped: {exc!r}", file=sys.stderr)


def _wait_for(path: Path, timeout_s: float) -> bool:
    end = time.monotonic() + timeout_s
    while not path.exists():
        if time.monotonic() > end:
            return False
        time.sleep(0.05)  # polling a file the supervisor creates; 50 ms adds nothing noticeable
    return True


if __name__ == "__main__":
    raise SystemExit(main())
