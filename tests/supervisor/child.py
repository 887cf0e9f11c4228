"""A small real process for supervisor tests: serves HTTP, writes a trainer-style status file.

    python child.py --port P [--status FILE] [--done-when FILE] [--exit-code N]
                    [--no-heartbeat] [--phase-at-exit PHASE] [--spawn-grandchild]
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
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


class Ok(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args: object) -> None:
        pass


def write_status(path: Path, phase: str, step: int) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"phase": phase, "step": step, "num_steps": 2, "heartbeat": time.time(), "pid": os.getpid(), "error": "step 2 raised: boom" if phase == "failed" else None}))
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
    parser.add_argument("--spawn-grandchild", action="store_true")
    parser.add_argument("--touch", type=Path)
    parser.add_argument("--wait-for", type=Path, help="with --touch: only once this file exists")
    args = parser.parse_args()
    print(f"child {os.getpid()} starting", flush=True)
    if args.touch:
        while args.wait_for and not args.wait_for.exists():
            time.sleep(0.02)
        args.touch.write_text(str(time.time()))
        print("touched, exiting", flush=True)
        return args.exit_code
    if args.spawn_grandchild:
        subprocess.Popen([sys.executable, "-c", "import time\nwhile True: time.sleep(1)"], stdin=subprocess.DEVNULL)
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Ok)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    print(f"serving on {args.port}", flush=True)
    while True:
        if args.done_when and args.done_when.exists():
            if args.status:
                write_status(args.status, args.phase_at_exit, 2)
            print(f"done, exiting with {args.exit_code}", flush=True)
            return args.exit_code
        if args.status and not args.no_heartbeat and args.heartbeats != 0:
            write_status(args.status, "training", 1)
            args.heartbeats -= 1
        time.sleep(0.1)


if __name__ == "__main__":
    raise SystemExit(main())
