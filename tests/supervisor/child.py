"""A small real process for supervisor tests: serves HTTP, writes a trainer-style status file.

    python child.py --port P [--status FILE] [--done-when FILE] [--exit-code N]
                    [--no-heartbeat] [--phase-at-exit PHASE] [--spawn-grandchild]
                    [--delay S] [--metrics FILE [--step-s S]] [--term-delay S]
    python child.py --touch FILE [--exit-code N]        (touch a file and exit)

It answers 200 to every GET on 127.0.0.1:P (readiness), rewrites --status every 0.1 s with a
heartbeat (unless --no-heartbeat), and when --done-when appears it writes the final phase and
exits with --exit-code. --spawn-grandchild starts a child in the same group, to check that whole
groups are ended.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


class Ok(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args: object) -> None:
        pass


def write_status(path: Path, phase: str, step: int, stop_cause: str | None = None) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(
        json.dumps(
            {
                "phase": phase,
                "step": step,
                "num_steps": 2,
                "heartbeat": time.time(),
                "pid": os.getpid(),
                "error": "step 2 raised: boom" if phase == "failed" else None,
                "stop_cause": stop_cause,
            }
        )
    )
    os.replace(tmp, path)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int)
    parser.add_argument("--status", type=Path)
    parser.add_argument("--done-when", type=Path)
    parser.add_argument("--exit-code", type=int, default=0)
    parser.add_argument("--no-heartbeat", action="store_true")
    parser.add_argument("--heartbeats", type=int, default=-1, help="stop heartbeating after N writes")
    parser.add_argument("--phase-at-exit", default="done")
    parser.add_argument("--stop-cause", default=None, help="with --phase-at-exit stopped: why it stopped itself")
    parser.add_argument("--spawn-grandchild", action="store_true")
    parser.add_argument("--touch", type=Path)
    parser.add_argument("--wait-for", type=Path, help="with --touch: only once this file exists")
    parser.add_argument("--delay", type=float, default=0.0, help="seconds of start-up before serving")
    parser.add_argument("--metrics", type=Path, help="append a metrics line (and a checkpoint record) per step")
    parser.add_argument("--step-s", type=float, default=0.5, help="with --metrics: seconds per step")
    parser.add_argument(
        "--term-delay", type=float, default=None, help="on SIGTERM, go on this long (finishing a step) and then exit 0"
    )
    args = parser.parse_args()
    if args.term_delay is not None:

        def finish_then_exit(*_: object) -> None:
            threading.Timer(args.term_delay, lambda: os._exit(0)).start()

        signal.signal(signal.SIGTERM, finish_then_exit)
    print(f"child {os.getpid()} starting", flush=True)
    if args.touch:
        while args.wait_for and not args.wait_for.exists():
            time.sleep(0.02)
        args.touch.write_text(str(time.time()))
        print("touched, exiting", flush=True)
        return args.exit_code
    if args.spawn_grandchild:
        subprocess.Popen([sys.executable, "-c", "import time\nwhile True: time.sleep(1)"], stdin=subprocess.DEVNULL)
    time.sleep(args.delay)  # standing in for imports and model loading
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Ok)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    print(f"serving on {args.port}", flush=True)
    step, next_step = 0, time.monotonic() + args.step_s
    while True:
        if args.metrics and time.monotonic() >= next_step:
            step, next_step = step + 1, next_step + args.step_s
            with open(args.metrics, "a") as fh:
                fh.write(
                    json.dumps({"step": step, "reward/mean": step / 10, "train/loss": 1 / step, "time": time.time()})
                    + "\n"
                )
            with open(args.metrics.with_name("checkpoints.jsonl"), "a") as fh:
                fh.write(json.dumps({"step": step, "path": f"checkpoints/step_{step}"}) + "\n")
        if args.done_when and args.done_when.exists():
            if args.status:
                write_status(args.status, args.phase_at_exit, 2, args.stop_cause)
            print(f"done, exiting with {args.exit_code}", flush=True)
            return args.exit_code
        if args.status and not args.no_heartbeat and args.heartbeats != 0:
            write_status(args.status, "training", 1)
            args.heartbeats -= 1
        time.sleep(0.1)


if __name__ == "__main__":
    raise SystemExit(main())
