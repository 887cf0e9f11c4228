"""Launcher of one model's Atropos `process` child in a smoke test:

    python -m mcp_rl.inference_test.child ENV_FILE CLASS_NAME --project-root DIR process --config CFG

Like `mcp_rl.environments.runner`, but it makes sure the environment talks to the server in
CFG's `openai:` section. Atropos applies that section only when `config_init()` returns a list
with one server: with a bare `APIServerConfig` or a `ServerBaseline` (BaseEnv's default) the
ServerManager silently builds its own servers on localhost:9004-9007, and with a list of two
or more it keeps the environment's own ones (atroposlib 0.4 `resolve_openai_configs`). So the
class's `config_init()` is hooked (mcp_rl.environments.atropos_hooks) to return one server, and
the YAML then decides where it is.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mcp_rl import redact
from mcp_rl.environments import atropos_hooks, failure_report
from mcp_rl.environments.loader import load_env_class
from mcp_rl.errors import UserError
from mcp_rl.settings import Settings


def one_server(servers: Any) -> tuple[list[Any], str | None]:
    """`servers` as a one-element list of APIServerConfig, and what was changed (None: nothing)."""
    # atroposlib is heavy (~3 s): the child imports it when it runs, never the server
    from atroposlib.envs.server_handling.server_baseline import APIServerConfig, ServerBaseline

    if isinstance(servers, list):
        if len(servers) == 1 and isinstance(servers[0], APIServerConfig):
            return servers, None
        first = next((s for s in servers if isinstance(s, APIServerConfig)), None)
        return [first or APIServerConfig()], f"config_init() returned {len(servers)} servers; the test uses one"
    if isinstance(servers, APIServerConfig):
        return [servers], "config_init() returned a bare APIServerConfig; wrapped in a list"
    if isinstance(servers, ServerBaseline):
        fields = {k: v for k, v in servers.model_dump().items() if k in APIServerConfig.model_fields}
        return [APIServerConfig(**fields)], "config_init() returned a ServerBaseline; replaced by one APIServerConfig"
    return [APIServerConfig()], f"config_init() returned {type(servers).__name__}; replaced by one APIServerConfig"


def point_at_config_server(cls: Any) -> None:
    """Hook `cls.config_init` so its servers are one APIServerConfig (see the module doc)."""

    def config_init(original: Callable[[], tuple[Any, Any]]) -> tuple[Any, list[Any]]:
        env_config, servers = original()
        servers, change = one_server(servers)
        if change:
            print(f"mcp-rl smoke test: {change}, pointed at the test's server", file=sys.stderr)
        return env_config, servers

    atropos_hooks.around_config_init(cls, config_init)


def _option(args: list[str], name: str) -> str | None:
    for i, arg in enumerate(args):
        if arg == name and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mcp_rl.inference_test.child", description=__doc__.splitlines()[0])
    parser.add_argument("env_file", type=Path)
    parser.add_argument("class_name")
    parser.add_argument("--project-root", type=Path, required=True)
    parser.add_argument("mode", choices=["process"])
    parser.add_argument("args", nargs=argparse.REMAINDER)
    ns = parser.parse_args(argv)
    env_file = ns.env_file.resolve()
    # Its log is written through the scrubber, which knows the keys this process holds.
    with contextlib.suppress(UserError):
        Settings.from_env()
    redact.scrub_std_streams()
    cls = load_env_class(env_file, ns.class_name, ns.project_root.resolve())
    point_at_config_server(cls)
    # What the environment raises is recorded beside the config, so the test names it.
    failure_report.install_beside_config(cls, _option(ns.args, "--config"), ns.project_root.resolve())
    # Atropos's CLI reads sys.argv; argv[0] names the file for its help and error messages.
    sys.argv = [str(env_file), ns.mode, *ns.args]
    cls.cli()  # raises SystemExit with the environment's exit code
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
