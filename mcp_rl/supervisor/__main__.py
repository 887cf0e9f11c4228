"""`python -m mcp_rl.supervisor --run-dir DIR`: the detached program that supervises one run.

Started by `service.start_run` in its own session, so it outlives the MCP server. It records its
own identity, picks the run's ports, writes them into run.yaml and supervises the run to its end.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path

from mcp_rl import processes, redact
from mcp_rl.ports import allocate_ports
from mcp_rl.runconfig import RunConfig
from mcp_rl.rundir import RUN_FILE
from mcp_rl.settings import Settings
from mcp_rl.supervisor.launch import build_specs
from mcp_rl.supervisor.registry import Registry
from mcp_rl.supervisor.states import RunState, run_marker
from mcp_rl.supervisor.supervisor import Policy, ProcessSpec, RunSupervisor

log = logging.getLogger("mcp_rl.supervisor")


def main(argv: list[str] | None = None, build: Callable[..., list[ProcessSpec]] = build_specs) -> int:
    """Supervise one run. `build` makes its process specs from run.yaml (the fault-injection tests
    pass cheap stand-ins; everything else is this very program)."""
    parser = argparse.ArgumentParser(prog="python -m mcp_rl.supervisor", description=__doc__)
    parser.add_argument("--run-dir", type=Path, required=True)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(message)s")
    redact.install_log_filter()  # no key in a log (mcp_rl.redact)
    redact.scrub_std_streams()  # nor in a traceback or a library's print

    # Signal handlers only record the request; the supervising loop acts on it.
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda *_: stop.set())

    settings = Settings.from_env()
    registry = Registry(settings.state_db)
    config_path = (args.run_dir / RUN_FILE).resolve()
    config = RunConfig.load(config_path)
    run_id = config.run_id

    me = processes.identify(os.getpid())
    if me is None:
        raise RuntimeError("cannot read this process's own start time")
    registry.update_run(run_id, supervisor_pid=me.pid, supervisor_create_time=me.create_time)
    try:
        api_port, inference_port = allocate_ports(2, avoid=registry.active_ports())
        config = config.with_ports(api=api_port, inference=inference_port)
        config.dump(config_path)
        registry.update_run(run_id, api_port=api_port, inference_port=inference_port)
        policy = Policy.from_settings(settings)
        specs = build(config, config_path, settings, policy)
    except Exception as exc:
        registry.transition(run_id, RunState.FAILED, f"supervisor could not prepare the run: {exc!r}")
        # Nothing was started; a run already being stopped simply ends stopped.
        registry.transition(run_id, RunState.STOPPED, "stopped on request; nothing had started")
        raise
    row = registry.get_run(run_id)
    supervisor = RunSupervisor(
        run_id=run_id,
        marker=run_marker(row.run_dir) if row else None,
        registry=registry,
        specs=specs,
        trainer_status_path=config.paths.trainer_status,
        policy=policy,
        stop_signal=stop,
    )
    final = supervisor.run()
    return 0 if final in (RunState.COMPLETED, RunState.STOPPED) else 1


if __name__ == "__main__":
    raise SystemExit(main())
