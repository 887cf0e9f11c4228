"""A run with real stand-in processes, for the tests of stopping within a host's time limit."""

from __future__ import annotations

import json
import os
import sys
import threading
from subprocess import Popen

from mcp_rl import processes
from mcp_rl.settings import Settings
from mcp_rl.supervisor import service
from mcp_rl.supervisor.states import ProcState, RunState, run_marker
from tests.kit.runs import run_record
from tests.kit.wait import wait_for

SLEEPER = [sys.executable, "-c", "import time\nwhile True: time.sleep(1)"]
# A trainer that ignores SIGTERM (as one saving a big checkpoint would): it takes its whole grace.
STUBBORN = [
    sys.executable,
    "-c",
    "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nwhile True: time.sleep(1)",
]


def stand_in_run(settings: Settings, run_id: str) -> list[Popen[bytes]]:
    """A running run as the registry knows it, with real processes carrying its marker: a
    supervisor, an API, an environment and a trainer that ignores SIGTERM; metrics of 3 steps.
    The caller kills what is left of the returned processes."""
    registry = service.registry_for(settings)
    run_dir = settings.runs_dir / run_id
    (run_dir / "logs").mkdir(parents=True)
    (run_dir / "run.yaml").write_text(f"run_id: {run_id}\n")
    (run_dir / "metrics.jsonl").write_text(
        "".join(json.dumps({"step": s, "reward/mean": s / 10, "train/loss": 1 / s}) + "\n" for s in (1, 2, 3))
    )
    registry.create_run(run_record(run_id, run_dir))
    registry.transition(run_id, RunState.RUNNING, "all processes ready")
    marker = run_marker(str(run_dir))
    popens = []
    for name, argv in (("supervisor", SLEEPER), ("api", SLEEPER), ("env", SLEEPER), ("trainer", STUBBORN)):
        popen = processes.spawn(argv, run_dir / "logs" / f"{name}.log", dict(os.environ), marker=marker)
        # Ours to reap once the server has ended them (a zombie would still look alive).
        threading.Thread(target=popen.wait, daemon=True).start()

        def exec_d(pid: int = popen.pid) -> processes.ProcessIdentity | None:
            ident = processes.identify(pid)  # its environment (the marker) is readable once exec'd
            return ident if ident is not None and ident.marker == marker else None

        ident = wait_for(exec_d, 10, f"the {name} stand-in to come up")
        if name == "supervisor":
            registry.update_run(run_id, supervisor_pid=ident.pid, supervisor_create_time=ident.create_time)
        else:
            registry.set_process(
                run_id, name, state=ProcState.RUNNING, pid=ident.pid, pgid=ident.pgid, create_time=ident.create_time
            )
        popens.append(popen)
    return popens
