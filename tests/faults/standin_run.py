"""`python -m tests.faults.standin_run --run-dir DIR`: the real run supervisor program
(`mcp_rl.supervisor.__main__`) supervising cheap stand-ins: the real Atropos `run-api`, and
tests/supervisor/child.py as trainer (HTTP health, heartbeat, a metrics line and a checkpoint
record per step) and as environment. Starts in about a second, so faults can be injected at
start-up, mid-step and during a stop in a few seconds each.
"""

from __future__ import annotations

import sys
from pathlib import Path

from mcp_rl.ports import HOST, allocate_ports
from mcp_rl.runconfig import RunConfig
from mcp_rl.settings import Settings
from mcp_rl.supervisor import readiness
from mcp_rl.supervisor.__main__ import main
from mcp_rl.supervisor.supervisor import Policy, ProcessSpec

CHILD = str(Path(__file__).resolve().parent.parent / "supervisor" / "child.py")
TRAINER_DELAY_S = 1.5  # start-up windows to inject faults into
ENV_DELAY_S = 1.0
STEP_S = 0.4
TRAINER_TERM_DELAY_S = 1.0  # finishes its step on SIGTERM, like the real trainer


def standin_specs(config: RunConfig, config_path: Path, settings: Settings, policy: Policy) -> list[ProcessSpec]:
    api_port, inference_port = config.ports.api, config.ports.inference
    assert api_port is not None and inference_port is not None
    (env_port,) = allocate_ports(1, avoid={api_port, inference_port})
    env = settings.child_env()
    run_dir, logs = config.paths.run_dir, config.paths.logs_dir
    python = sys.executable
    return [
        ProcessSpec(
            "api",
            [python, "-m", "atroposlib.cli.run_api", "--host", HOST, "--port", str(api_port)],
            logs / "api.log",
            env,
            readiness.api_up(api_port),
            policy.api_ready_s,
            "GET /status",
            cwd=run_dir,
            port=api_port,
        ),
        ProcessSpec(
            "trainer",
            [
                python,
                CHILD,
                "--port",
                str(inference_port),
                "--status",
                str(config.paths.trainer_status),
                "--metrics",
                str(config.paths.metrics),
                "--step-s",
                str(STEP_S),
                "--delay",
                str(TRAINER_DELAY_S),
                "--term-delay",
                str(TRAINER_TERM_DELAY_S),
            ],
            logs / "trainer.log",
            env,
            readiness.trainer_serving(inference_port),
            policy.trainer_ready_s,
            "GET /health",
            cwd=run_dir,
            port=inference_port,
        ),
        ProcessSpec(
            "env",
            [python, CHILD, "--port", str(env_port), "--delay", str(ENV_DELAY_S)],
            logs / "env.log",
            env,
            readiness.http_ok(f"http://{HOST}:{env_port}/"),
            policy.env_ready_s,
            f"GET http://{HOST}:{env_port}/",
            cwd=run_dir,
        ),
    ]


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:], build=standin_specs))
