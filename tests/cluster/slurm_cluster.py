"""A single-node Slurm cluster on this machine, for tests: Debian's slurm-wlm and munge (installed
by scripts/install_slurm when missing), started without systemd as children of the test session:
`munged`, `slurmctld`, `slurmd` in the foreground, each with its own files in one folder, the
node at 127.0.0.1, on free loopback ports. `env()` is what a client needs (SLURM_CONF); nothing
outside the folder is read or written but Slurm's own binaries.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path
from types import TracebackType

from mcp_rl.ports import allocate_ports

REPO = Path(__file__).resolve().parents[2]
READY_DEADLINE_S = 120.0
# Long enough that a job's own gentle stop (the run's stop grace) is never cut by a plain scancel.
KILL_WAIT_S = 120

CONF = """\
ClusterName=mcprltest
SlurmctldHost=localhost(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort={ctld_port}
SlurmdPort={d_port}
AuthType=auth/munge
AuthInfo=socket={root}/munge/munge.socket
CredType=cred/munge
StateSaveLocation={root}/spool/ctld
SlurmdSpoolDir={root}/spool/d
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
MpiDefault=none
KillWait={kill_wait}
MinJobAge=3600
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
NodeName=localhost NodeAddr=127.0.0.1 CPUs={cpus} RealMemory=2000 State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP
"""


def ensure_installed() -> None:
    """Slurm and munge from Debian, by the project's own script (a no-op when present)."""
    if all(shutil.which(tool) for tool in ("sbatch", "slurmctld", "slurmd", "munged", "mungekey")):
        return
    subprocess.run([str(REPO / "scripts" / "install_slurm")], check=True, timeout=900)


class SlurmCluster:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.conf = root / "slurm.conf"
        self._daemons: list[subprocess.Popen[bytes]] = []

    def env(self) -> dict[str, str]:
        return {"SLURM_CONF": str(self.conf)}

    def _client_env(self) -> dict[str, str]:
        return {**os.environ, **self.env()}

    def _start(self, argv: list[str], log: str) -> None:
        with open(self.root / "log" / log, "ab") as out:
            self._daemons.append(
                subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=self._client_env(), cwd=self.root)
            )

    def __enter__(self) -> SlurmCluster:
        ensure_installed()
        for sub in ("munge", "spool/ctld", "spool/d", "log"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        (self.root / "munge").chmod(0o700)
        key = self.root / "munge" / "munge.key"
        subprocess.run(["mungekey", "--create", f"--keyfile={key}"], check=True, timeout=30)
        ctld_port, d_port = allocate_ports(2)
        self.conf.write_text(
            CONF.format(
                root=self.root, ctld_port=ctld_port, d_port=d_port, kill_wait=KILL_WAIT_S, cpus=os.cpu_count() or 1
            )
        )
        munge = self.root / "munge"
        try:
            self._start(
                [
                    "munged",
                    "--foreground",
                    "--force",
                    f"--socket={munge / 'munge.socket'}",
                    f"--key-file={key}",
                    f"--log-file={self.root / 'log' / 'munged.log'}",
                    f"--pid-file={munge / 'munged.pid'}",
                    f"--seed-file={munge / 'munged.seed'}",
                ],
                "munged.out",
            )
            self._wait(lambda: (munge / "munge.socket").exists(), "munged's socket")
            self._start(["slurmctld", "-D", "-i", "-f", str(self.conf)], "slurmctld.out")
            self._start(["slurmd", "-D", "-N", "localhost", "-f", str(self.conf)], "slurmd.out")
            self._wait(self._node_idle, "the node idle in sinfo")
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _node_idle(self) -> bool:
        for daemon in self._daemons:
            if daemon.poll() is not None:
                logs = "\n".join(p.read_text(errors="replace")[-2000:] for p in (self.root / "log").iterdir())
                raise RuntimeError(f"{daemon.args[0]} exited {daemon.returncode}:\n{logs}")
        result = subprocess.run(
            ["sinfo", "-h", "-o", "%t"], capture_output=True, text=True, env=self._client_env(), timeout=30, check=False
        )
        return result.stdout.strip() == "idle"

    def _wait(self, ready: object, what: str) -> None:
        end = time.monotonic() + READY_DEADLINE_S
        while not ready():  # type: ignore[operator]
            if time.monotonic() > end:
                raise RuntimeError(f"Slurm test cluster: no {what} after {READY_DEADLINE_S:g} s")
            time.sleep(0.2)

    def scontrol(self, *args: str) -> str:
        return subprocess.run(
            ["scontrol", *args], capture_output=True, text=True, env=self._client_env(), timeout=30, check=True
        ).stdout

    def scancel(self, *args: str) -> None:
        subprocess.run(["scancel", *args], env=self._client_env(), timeout=30, check=True)

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        # Jobs first (their processes end with them), then the daemons, last started first.
        if self._daemons and all(d.poll() is None for d in self._daemons):
            subprocess.run(["scancel", "--full", "--user=root"], env=self._client_env(), timeout=30, check=False)
            end = time.monotonic() + 60
            while time.monotonic() < end:
                queued = subprocess.run(
                    ["squeue", "-h"], capture_output=True, text=True, env=self._client_env(), timeout=30, check=False
                )
                if queued.returncode != 0 or not queued.stdout.strip():
                    break
                time.sleep(0.5)
        for daemon in reversed(self._daemons):
            if daemon.poll() is None:
                daemon.terminate()
                try:
                    daemon.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    daemon.kill()
                    daemon.wait(timeout=30)
        self._daemons.clear()
