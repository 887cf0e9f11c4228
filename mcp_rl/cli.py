"""The `mcp-rl` command: serve (the MCP server) and the commands people use.

    mcp-rl --version
    mcp-rl serve [--transport stdio|http] [--host H] [--port P]
    mcp-rl demo [--home DIR] [--steps N]
    mcp-rl new-env NAME [--folder DIR]
    mcp-rl doctor [--offline] [--json]
    mcp-rl runs list|status|logs|stop ...
    mcp-rl serve-model RUN_ID [--step N] [--detach] | --list | --stop SERVE_ID
    mcp-rl export RUN_ID [--step N] [--format adapter|merged] [--dest DIR] [--push-to-hub REPO]

This module only parses arguments and dispatches; the work lives in the modules it names, each
imported by the command that uses it (`serve` must not pay for the demo's MCP client, the doctor,
the runs CLI or the HTTP stack: start-up is what a host waits for).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import TYPE_CHECKING, Any

from mcp_rl import __version__, fast_start, first_answer, redact
from mcp_rl.errors import McpRlError, NotFound
from mcp_rl.home import cache_dir, home_dir

if TYPE_CHECKING:
    from mcp_rl.settings import Settings


def client_went_away(exc: BaseException) -> bool:
    """A broken pipe on stdout, alone or as the only errors of an exception group (the SDK's
    stdio writer raises it inside a task group)."""
    if isinstance(exc, BrokenPipeError):
        return True
    if isinstance(exc, BaseExceptionGroup):
        return all(client_went_away(e) for e in exc.exceptions)
    return False


def _serve(args: argparse.Namespace) -> int:
    # A host's first request (Claude Code's server/discover) is answered before the SDK loads, from
    # the answer a start before kept (mcp_rl.first_answer); the relay takes over stdin right away.
    if args.transport == "stdio":
        kept_at, key = cache_dir(home_dir(os.environ)) / first_answer.FILE_NAME, first_answer.code_key()
        first_answer.FirstAnswer(kept_at, key)
    # Start-up is what a host waits for (mcp_rl.fast_start says what is skipped until built).
    fast_start.begin()
    # Each command imports what it uses (see the module's docstring).
    from mcp_rl.settings import Settings

    if args.transport == "stdio":
        # The SDK and the server's modules load while the first answer goes out.
        from mcp_rl.server import build_server

        def registered() -> None:
            # Off the first answers' path (on the registration's worker thread): this server's
            # own server/discover answer, kept for the next start's first answer.
            from mcp_types.version import LATEST_MODERN_VERSION  # loaded with the SDK by now

            first_answer.keep(kept_at, key, first_answer.Kept(LATEST_MODERN_VERSION, server.discover_result()))
            fast_start.done()

        # The surface is registered while the server already answers (server/rl_server.py);
        # the fast start ends when it is in.
        from mcp_rl.server.stdin_guard import guard_stdin

        server = build_server(after_registration=registered)
        # Behind the first answer's relay: a line the SDK cannot parse still gets an answer.
        guard_stdin()
        try:
            server.run()
        except BaseException as exc:
            if not client_went_away(exc):
                raise
            # The host closed its end (it exited or was killed): nothing to report to it, and
            # no traceback for the person reading stderr. Python's own flush of stdout at exit
            # would fail the same way, so stdout points nowhere from here on.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            print("mcp-rl: the client closed the connection; the server exits.", file=sys.stderr)
        return 0
    from mcp_rl.http_serve import serve_http  # the HTTP stack: only for --transport http

    settings = Settings.from_env()
    if args.allow_host:  # on top of MCP_RL_ALLOWED_HOSTS
        settings = settings.model_copy(update={"http_allowed_hosts": [*settings.http_allowed_hosts, *args.allow_host]})
    fast_start.done()
    serve_http(args.host, args.port, args.path, settings)
    return 0


def _doctor(args: argparse.Namespace) -> int:
    from mcp_rl.doctor import render, run_checks  # each command imports what it uses

    report = run_checks(os.environ, offline=args.offline, http_port=args.port)
    print(report.model_dump_json(indent=2) if args.json else render(report))
    return 1 if report.failed else 0


def _runs(args: argparse.Namespace) -> int:
    # Each command imports what it uses (see the module's docstring).
    from mcp_rl import runs_cli
    from mcp_rl.settings import Settings

    settings = Settings.from_env()
    try:
        return _runs_command(args, settings, runs_cli)
    except NotFound as exc:
        raise NotFound(f"{exc} From a shell: `mcp-rl runs list` (state directory {settings.home}).") from exc


def _runs_command(args: argparse.Namespace, settings: Settings, runs_cli: Any) -> int:
    if args.runs_command == "list":
        return runs_cli.cmd_list(settings, args.json)
    if args.runs_command == "status":
        return runs_cli.cmd_status(settings, args.run_id, args.json)
    if args.runs_command == "logs":
        return runs_cli.cmd_logs(settings, args.run_id, args.process, args.tail, args.follow)
    return runs_cli.cmd_stop(settings, args.run_id, args.json)


def _serve_model(args: argparse.Namespace) -> int:
    # only this command needs the serving code (model resolution, ports, process records)
    from mcp_rl.serve_cli import cmd_serve
    from mcp_rl.settings import Settings

    return cmd_serve(Settings.from_env(), args)


def _export(args: argparse.Namespace) -> int:
    # only this command needs the export jobs (the worker imports torch, tinker, the hub)
    from mcp_rl.settings import Settings
    from mcp_rl.weights.cli import cmd_export

    return cmd_export(Settings.from_env(), args)


def _new_env(args: argparse.Namespace) -> int:
    # only this command writes a task file
    from mcp_rl.environments.scaffold import new_task_file
    from mcp_rl.settings import Settings

    made = new_task_file(Settings.from_env(), args.name, args.folder)
    print(f"Wrote {made.path}")
    print("Edit:")
    for line in made.edit:
        print(f"  - {line}")
    print("Then, from your agent:")
    for line in made.next_calls:
        print(f"  - {line}")
    for note in made.notes:
        print(f"Note: {note}")
    return 0


def _demo(args: argparse.Namespace) -> int:
    from mcp_rl.demo import DemoOptions, run_demo  # the MCP client stack: only for the demo

    return run_demo(DemoOptions(home=args.home, steps=args.steps))


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds above 0 (e.g. 3600)")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mcp-rl", description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--version", action="version", version=f"mcp-rl {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser(
        "serve",
        help="Run the MCP server (stdio by default).",
        description="Run the MCP server. HTTP binds 127.0.0.1 unless --host says otherwise; "
        "every HTTP request's Host/Origin must name the server; any non-loopback --host needs "
        "MCP_RL_TOKEN (clients send Authorization: Bearer <token>) and, for 0.0.0.0 or ::, "
        "MCP_RL_ALLOWED_HOSTS (the names clients use).",
    )
    serve.add_argument("--transport", choices=["stdio", "http"], default="stdio")
    serve.add_argument("--host", default="127.0.0.1", help="HTTP bind address (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8000, help="HTTP port (default 8000)")
    serve.add_argument("--path", default="/mcp", help="HTTP endpoint path (default /mcp)")
    serve.add_argument(
        "--allow-host",
        action="append",
        default=[],
        metavar="NAME",
        help="a host name or address HTTP clients use to reach the server (repeatable; adds to "
        "MCP_RL_ALLOWED_HOSTS; needed for --host 0.0.0.0 or ::)",
    )
    serve.set_defaults(func=_serve)

    demo = sub.add_parser("demo", help="Run the embedded default end to end through a real MCP client (no keys).")
    demo.add_argument(
        "--home", default=None, help="state directory for the demo (default: a new folder under MCP_RL_HOME/demos)"
    )
    demo.add_argument(
        "--steps",
        type=int,
        default=None,
        help="training steps (default: the shipped 30 steps of 32 sequences; N: a short run of N steps of 8)",
    )
    demo.set_defaults(func=_demo)

    new_env = sub.add_parser(
        "new-env",
        help="Write a working task file (mcp_rl.task) to edit into your own task.",
        description="Write NAME.py, a complete task on mcp-rl's task interface, into --folder (default: the "
        "first MCP_RL_ENV_PATHS folder, else $MCP_RL_HOME/envs). An existing file is never replaced.",
    )
    new_env.add_argument("name", help="a lowercase identifier, e.g. larger_number")
    new_env.add_argument("--folder", default=None, help="absolute folder to write into")
    new_env.set_defaults(func=_new_env)

    doctor = sub.add_parser("doctor", help="Check Python, packages, the model cache, the state dir, ports and keys.")
    doctor.add_argument("--offline", action="store_true", help="do not contact Tinker, W&B or OpenRouter")
    doctor.add_argument("--json", action="store_true", help="print the checks as JSON")
    doctor.add_argument("--port", type=int, default=8000, help="HTTP port to check (default 8000)")
    doctor.set_defaults(func=_doctor)

    served = sub.add_parser(
        "serve-model",
        help="Serve a run's saved checkpoint behind an OpenAI-compatible endpoint (prints base URL and model name).",
        description="Serve a run's saved checkpoint (local: base + its LoRA adapter on 127.0.0.1, "
        "/v1/chat/completions and /v1/completions with logprobs) until Ctrl-C, or in the background "
        "with --detach. Tinker runs: prints Tinker's OpenAI-compatible endpoint and the checkpoint path.",
    )
    served.add_argument("run_id", nargs="?", help="the run (mcp-rl runs list)")
    served.add_argument("--step", type=int, default=None, help="a saved step (default: the newest)")
    served.add_argument("--port", type=int, default=None, help="port on 127.0.0.1 (default: a free one)")
    served.add_argument("--detach", action="store_true", help="keep serving in the background and return")
    served.add_argument("--list", action="store_true", help="list the models served in the background")
    served.add_argument("--stop", metavar="SERVE_ID", default=None, help="stop a model served in the background")
    served.add_argument("--json", action="store_true", help="print one JSON object")
    served.set_defaults(func=_serve_model)

    exported = sub.add_parser(
        "export",
        help="Export a run's trained weights: a PEFT adapter or a merged Hugging Face model (optionally to the Hub).",
        description="Export a run's weights into a folder (default runs/<id>/exports/step_<N>-<format>). "
        "Tinker runs: the checkpoint is downloaded through the Tinker SDK first (a short Tinker session). "
        "--push-to-hub uses HF_TOKEN or your `hf auth login`, private repo.",
    )
    exported.add_argument("run_id", help="the run (mcp-rl runs list)")
    exported.add_argument("--step", type=int, default=None, help="a saved step (default: the newest)")
    exported.add_argument("--format", choices=["adapter", "merged"], default="adapter")
    exported.add_argument("--dest", default=None, help="destination folder (refused if it exists, unless --overwrite)")
    exported.add_argument("--push-to-hub", default=None, metavar="REPO", help="also push to this Hub repo (user/name)")
    exported.add_argument("--overwrite", action="store_true", help="replace an existing destination")
    exported.add_argument(
        "--timeout",
        type=_positive_seconds,
        default=3600.0,
        help="wait at most this many seconds (default 3600); the export then goes on in the background "
        "(exit code 3) and rl_get_export_result collects it",
    )
    exported.add_argument("--json", action="store_true", help="print the result as JSON")
    exported.set_defaults(func=_export)

    runs = sub.add_parser("runs", help="List, inspect, read logs of and stop training runs.")
    runs_sub = runs.add_subparsers(dest="runs_command", required=True)
    runs_list = runs_sub.add_parser("list", help="all runs, newest first")
    runs_list.add_argument("--json", action="store_true")
    runs_status = runs_sub.add_parser("status", help="one run in detail")
    runs_status.add_argument("run_id")
    runs_status.add_argument("--json", action="store_true")
    runs_logs = runs_sub.add_parser("logs", help="the end of one process's log")
    runs_logs.add_argument("run_id")
    runs_logs.add_argument("--process", "-p", default="trainer", choices=["api", "trainer", "env", "supervisor"])
    runs_logs.add_argument("--tail", "-n", type=int, default=50)
    runs_logs.add_argument("--follow", "-f", action="store_true", help="keep printing until the run ends")
    runs_stop = runs_sub.add_parser("stop", help="stop a run (env, trainer, API) and wait until nothing is left")
    runs_stop.add_argument("run_id")
    runs_stop.add_argument("--json", action="store_true")
    runs.set_defaults(func=_runs)
    return parser


def main(argv: list[str] | None = None) -> int:
    # Logs go to stderr: stdout carries the stdio protocol.
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    redact.install_log_filter()  # no key in a log (mcp_rl.redact)
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except McpRlError as exc:
        print(f"mcp-rl {args.command}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
