"""Launcher of an environment process: `serve` in a run, `process` in smoke tests.

    python -m mcp_rl.environments.runner ENV_FILE CLASS_NAME [--project-root DIR]
        [--start-when FILE] MODE [ARGS...]

MODE and ARGS are the environment's own Atropos CLI (`serve --config run.yaml`,
`process --env.total_steps 3 ...`). The file is imported under a private module name (never
`__main__`, so its own `cli()` call at the bottom does not fire) with its project root on
sys.path and as the working directory; then the class's `cli()` runs with these arguments.

The loading rules are those of selection (`loader`: package-relative imports, the working
directory selection found), and a failing `config_init()` falls back the way selection does
(the config class's defaults, with the run's values from the YAML on top), so an environment that
selects also runs.

With --start-when, the environment is imported first and MODE starts only once FILE exists: the
supervisor starts an environment's (slow) imports while the trainer loads, and creates FILE
when the trainer is ready, so `serve` still begins strictly after it.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from pydantic import create_model

from mcp_rl import redact
from mcp_rl.environments import atropos_hooks, eval_capture, failure_report, score_guard
from mcp_rl.environments.dependencies import missing_dependency
from mcp_rl.environments.loader import load_env_class
from mcp_rl.errors import UserError
from mcp_rl.settings import Settings

# Options of the Atropos CLI whose value is a path: resolved before we change directory.
_PATH_OPTIONS = ("--config",)
# An environment held back longer than this gives up (its supervisor is gone).
START_WHEN_TIMEOUT_S = 3600.0
# Some environments create an OpenAI client when imported (it raises without a key). Atropos
# passes its own key to its servers, so a placeholder only lets such a module import; a judge
# call that really needs OpenAI then fails with an authentication error that says so.
PLACEHOLDER_KEYS = {"OPENAI_API_KEY": "mcp-rl-placeholder"}


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
    # The keys this process holds (only those the environment named, W&B's for a run that logs
    # there) are known to the scrubber, and its log (env.log) is written through it.
    with contextlib.suppress(UserError):
        Settings.from_env()
    redact.scrub_std_streams()
    for name, value in PLACEHOLDER_KEYS.items():
        os.environ.setdefault(name, value)
    try:
        cls = load_env_class(env_file, ns.class_name, project_root)
    except ModuleNotFoundError as exc:
        if exc.name is None:
            raise
        # One line that says what to install (the traceback would only show where it was imported).
        print(missing_dependency(exc.name, env_file, project_root).sentence(env_file.stem), file=sys.stderr)
        return 2
    _guard_config_init(cls, _yaml_env(env_args))
    # A NaN score would stall the run at the API with no cause given: refused here, in words.
    score_guard.install(cls, f"{env_file.name}:{ns.class_name}")
    # Atropos logs an exception in collect_trajectories and retries forever: counted beside the
    # run's config (env_health.json), so the supervisor can end a run that cannot progress.
    failure_report.install_beside_config(cls, _config_path(env_args), project_root)
    if start_when is not None:
        _prewarm(env_args)
    if start_when is not None and not _wait_for(start_when, START_WHEN_TIMEOUT_S):
        print(f"gave up waiting for {start_when} after {START_WHEN_TIMEOUT_S:g} s", file=sys.stderr)
        return 1
    # The Atropos hooks (atropos_hooks): what a run's environment logs also goes to the run dir, not
    # only W&B; an evaluation mcp-rl runs (mcp_rl.proof.env_eval) keeps whatever evaluate() reports.
    eval_capture.install_for_run(ns.mode, env_args)
    eval_capture.install_for_evaluate(cls, ns.mode, env_args)
    # Atropos's CLI reads sys.argv; argv[0] names the file for its help and error messages.
    sys.argv = [str(env_file), ns.mode, *env_args]
    cls.cli()  # run_and_exit: raises SystemExit with the environment's exit code
    return 0


def _config_path(env_args: list[str]) -> str | None:
    for i, arg in enumerate(env_args):
        if arg == "--config" and i + 1 < len(env_args):
            return env_args[i + 1]
        if arg.startswith("--config="):
            return arg.split("=", 1)[1]
    return None


def _yaml_env(env_args: list[str]) -> dict[str, Any]:
    """The `env:` section of the run's YAML (empty without one)."""
    path = _config_path(env_args)
    if path is None:
        return {}
    with open(path, encoding="utf-8") as fh:
        data = yaml.safe_load(fh) or {}
    return dict(data.get("env") or {})


def fallback_config(cls: Any, values: dict[str, Any]) -> Any:
    """The environment's config class (BaseEnvConfig without one) built from `values`; fields it
    requires become defaults of a subclass, since Atropos's CLI would otherwise demand them as
    flags. Raises ValueError naming required fields that have no value."""
    # atroposlib is heavy: only the fallback (a failing config_init) needs it here
    from atroposlib.envs.base import BaseEnvConfig

    config_cls = getattr(cls, "env_config_cls", None) or BaseEnvConfig
    known = {k: v for k, v in values.items() if k in config_cls.model_fields}
    required = [n for n, f in config_cls.model_fields.items() if f.is_required()]
    missing = [n for n in required if n not in known]
    if missing:
        raise ValueError(
            f"{config_cls.__name__} requires {', '.join(missing)}; set them with rl_edit_config before the run"
        )
    if required:
        fields: Any = {n: (config_cls.model_fields[n].annotation, known[n]) for n in required}
        config_cls = create_model(config_cls.__name__, __base__=config_cls, **fields)
    return config_cls(**known)


def _guard_config_init(cls: Any, values: dict[str, Any]) -> None:
    """Make config_init() fall back as selection did when the environment's own one fails."""

    def config_init(original: Callable[[], tuple[Any, Any]]) -> tuple[Any, Any]:
        try:
            return original()
        except Exception as exc:  # the environment's own code; selection fell back the same way
            # atroposlib is heavy: only the fallback (a failing config_init) needs it here
            from atroposlib.envs.base import ServerBaseline

            print(
                f"config_init() raised {type(exc).__name__}: {exc}; using the config class's defaults "
                "with the run's values",
                file=sys.stderr,
            )
            return fallback_config(cls, values), ServerBaseline()

    atropos_hooks.around_config_init(cls, config_init)


def _prewarm(env_args: list[str]) -> None:
    """Load the run's tokenizer once while held: every Atropos environment does so first when it
    starts, and transformers imports most of itself lazily on that first load (seconds)."""
    config = _config_path(env_args)
    if config is None:
        return
    try:
        # transformers is heavy: the prewarm is what loads it, while the environment is held
        from transformers import AutoTokenizer

        with open(config, encoding="utf-8") as fh:
            name = (yaml.safe_load(fh).get("env") or {}).get("tokenizer_name")
        if name:
            # Atropos's BaseEnv loads the same tokenizer again when it starts (a few hundred ms of a
            # run's start-up): its first plain load gets this one (atropos_hooks.hand_over_once).
            atropos_hooks.hand_over_once(AutoTokenizer, name, AutoTokenizer.from_pretrained(name))
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
