"""The run supervisor: brings a run's processes up in order, watches them, ends the run honestly.

One supervisor per run, in its own session, detached from the MCP server that asked for it. It
talks to the world only through the registry (state changes, process rows) and files; a stop is
requested by setting the run to `stopping` in the registry (and, for promptness, SIGTERM).

End states:
- completed: the trainer exited 0 *and* its status file says it finished (exit codes lie).
- failed: any process exited with an error, hung past its deadline, or the API went away; the
  cause names the process, its exit code and its last log lines. The others are then stopped.
  Also when the environment keeps raising (env_health.json; mcp_rl.supervisor.env_watch): the
  cause names the exception, its message and where it was raised.
- stopped: a stop was requested; groups are ended env -> trainer -> API.
The environment exiting 0 is normal: it stops producing once enough batches are queued.
"""

from __future__ import annotations

import logging
import subprocess
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel

from mcp_rl import processes
from mcp_rl.rundir import ENV_HEALTH_FILE, TrainerPhase, TrainerStatus, read_env_health, read_trainer_status
from mcp_rl.settings import Settings
from mcp_rl.supervisor import env_watch
from mcp_rl.supervisor.readiness import Outcome, Probe, wait_ready
from mcp_rl.supervisor.registry import Registry
from mcp_rl.supervisor.states import ProcState, RunState
from mcp_rl.supervisor.tail import tail_lines

log = logging.getLogger(__name__)

LOG_TAIL_LINES = 20


def _or(value: float | None, default: float) -> float:
    return default if value is None else value


class Policy(BaseModel):
    """Deadlines and periods of a supervisor. MCP_RL_* variables override them (via Settings)."""

    api_ready_s: float = 60.0
    # The first local run may convert the embedded model before serving.
    trainer_ready_s: float = 900.0
    env_ready_s: float = 600.0
    # trainer_status.json is rewritten at least every 5 s; silence this long means hung.
    heartbeat_timeout_s: float = 120.0
    # The API is probed every `api_probe_period_s`; unanswered this long means hung.
    api_unresponsive_s: float = 60.0
    api_probe_period_s: float = 5.0
    stop_grace_s: float = 10.0
    # An environment raising the same exception on this many groups in a row, or scoring none
    # this long after its first failure, ends the run (Atropos would retry it forever).
    env_fail_streak: int = 8
    env_no_score_s: float = 60.0
    # On SIGTERM the trainer finishes the step in flight and saves a checkpoint first.
    trainer_stop_grace_s: float = 45.0
    poll_s: float = 0.5

    @classmethod
    def from_settings(cls, settings: Settings) -> Policy:
        """The defaults, with what the user set (read and checked once, in Settings)."""
        d = cls()
        return cls(
            api_ready_s=_or(settings.api_ready_s, d.api_ready_s),
            trainer_ready_s=_or(settings.trainer_ready_s, d.trainer_ready_s),
            env_ready_s=_or(settings.env_ready_s, d.env_ready_s),
            heartbeat_timeout_s=_or(settings.heartbeat_timeout_s, d.heartbeat_timeout_s),
            api_unresponsive_s=_or(settings.api_unresponsive_s, d.api_unresponsive_s),
            stop_grace_s=_or(settings.stop_grace_s, d.stop_grace_s),
            trainer_stop_grace_s=_or(settings.trainer_stop_grace_s, d.trainer_stop_grace_s),
        )

    def grace_for(self, name: str) -> float:
        return self.trainer_stop_grace_s if name == "trainer" else self.stop_grace_s

    def total_stop_s(self) -> float:
        """Longest a full stop can take: each grace, plus the wait after each kill."""
        return self.trainer_stop_grace_s + 2 * self.stop_grace_s + 3 * processes.KILL_WAIT_S


@dataclass
class ProcessSpec:
    """How to start one supervised process and how to know it is ready."""

    name: str
    argv: list[str]
    log_path: Path
    env: dict[str, str]
    ready: Probe
    ready_deadline_s: float
    ready_description: str
    cwd: Path | None = None
    port: int | None = None
    # Started together with the first process, so that its imports and loading overlap the
    # start-up of those before it. A process that must not begin its work until they are ready
    # waits for `release()`, which the supervisor calls once the one before it is ready.
    prestart: bool = False
    release: Callable[[], None] | None = None


@dataclass
class _Running:
    spec: ProcessSpec
    popen: subprocess.Popen[bytes]
    identity: processes.ProcessIdentity
    exit_code: int | None = None
    ended: bool = False  # exit seen and recorded


@dataclass(frozen=True)
class Verdict:
    state: RunState  # COMPLETED, FAILED or STOPPED
    cause: str


def _phase(status: TrainerStatus) -> str:
    return f"'{status.phase}'" if status.phase else "not recorded"


@dataclass
class RunSupervisor:
    run_id: str
    registry: Registry
    specs: list[ProcessSpec]
    trainer_status_path: Path
    policy: Policy = field(default_factory=Policy)
    stop_signal: threading.Event = field(default_factory=threading.Event)
    # Carried by every process of the run (see states.run_marker): what proves them ours.
    marker: str | None = None
    clock: Callable[[], float] = time.time
    _procs: dict[str, _Running] = field(default_factory=dict)
    _api_last_ok: float = 0.0
    _api_last_probe: float = 0.0
    _wandb_url_seen: bool = False

    # --- entry point ------------------------------------------------------------------------
    def run(self) -> RunState:
        """Supervise the run to its end; returns the final state recorded."""
        try:
            verdict = self._start_all() or self._watch()
        except Exception:  # a supervisor bug must still end the run honestly
            verdict = Verdict(RunState.FAILED, f"supervisor error:\n{traceback.format_exc(limit=5)}")
        except BaseException:
            self._end(Verdict(RunState.FAILED, "supervisor interrupted"))
            raise
        return self._end(verdict)

    # --- start-up, in order, each after the previous one is ready ----------------------------
    def _start_all(self) -> Verdict | None:
        for index, spec in enumerate(self.specs):
            if self._stop_requested():
                return Verdict(RunState.STOPPED, "stop requested while starting")
            running = self._procs.get(spec.name) or self._spawn(spec)
            if index == 0:
                for early in self.specs[1:]:
                    if early.prestart:
                        self._spawn(early)
            if spec.release is not None:
                spec.release()
                self.registry.record_event(self.run_id, spec.name, "released", "the previous process is ready")
            problem: list[Verdict] = []

            def ended_or_hung() -> bool:
                # A stale heartbeat counts only once the trainer has written one: loading a
                # model may take a while before the first.
                verdict = self._check_exits(starting=True) or self._check_trainer_heartbeat(started_only=True)
                if verdict is not None:
                    problem.append(verdict)
                return bool(problem) or running.ended

            outcome = wait_ready(
                spec.ready,
                deadline_s=spec.ready_deadline_s,
                exited=ended_or_hung,
                abort=self._stop_requested,
            )
            if problem:
                return problem[0]
            if outcome == Outcome.READY:
                self.registry.set_process(self.run_id, spec.name, state=ProcState.RUNNING, ready_at=self.clock())
                log.info("run %s: %s ready", self.run_id, spec.name)
                continue
            if outcome == Outcome.ABORTED:
                return Verdict(RunState.STOPPED, "stop requested while starting")
            if outcome == Outcome.EXITED:
                if spec.ready():  # an environment that registered and already finished
                    self.registry.set_process(self.run_id, spec.name, ready_at=self.clock())
                    continue
                return Verdict(
                    RunState.FAILED,
                    f"{spec.name} exited 0 before it was ready ({spec.ready_description})." + self._log_tail(spec),
                )
            return Verdict(
                RunState.FAILED,
                f"{spec.name} did not become ready within {spec.ready_deadline_s:g} s "
                f"({spec.ready_description}); pid {running.popen.pid} still running." + self._log_tail(spec),
            )
        self._api_last_ok = self.clock()
        if self.registry.transition(self.run_id, RunState.RUNNING, "all processes ready"):
            log.info("run %s: running", self.run_id)
        return None

    def _spawn(self, spec: ProcessSpec) -> _Running:
        popen = processes.spawn(spec.argv, spec.log_path, spec.env, spec.cwd, marker=self.marker)
        identity = processes.identify(popen.pid) or processes.ProcessIdentity(popen.pid, popen.pid, self.clock())
        running = _Running(spec=spec, popen=popen, identity=identity)
        self._procs[spec.name] = running
        self.registry.set_process(
            self.run_id,
            spec.name,
            state=ProcState.STARTING,
            pid=identity.pid,
            pgid=identity.pgid,
            create_time=identity.create_time,
            port=spec.port,
            started_at=self.clock(),
            log_path=str(spec.log_path),
        )
        log.info("run %s: started %s (pid %d): %s", self.run_id, spec.name, popen.pid, " ".join(spec.argv))
        return running

    # --- watching ---------------------------------------------------------------------------
    def _watch(self) -> Verdict:
        while True:
            if self._stop_requested():
                return Verdict(RunState.STOPPED, "stop requested")
            verdict = (
                self._check_exits(starting=False)
                or self._check_trainer_heartbeat()
                or self._check_api()
                or self._check_env_health()
            )
            if verdict is not None:
                return verdict
            self.stop_signal.wait(self.policy.poll_s)

    def _check_exits(self, starting: bool) -> Verdict | None:
        for name, running in self._procs.items():
            if running.ended:
                continue
            code = running.popen.poll()
            if code is None:
                continue
            running.exit_code, running.ended = code, True
            normal_env_end = name == "env" and code == 0
            cause = (
                "finished producing batches (normal; the trainer consumes what is queued)"
                if normal_env_end
                else processes.exit_description(code)
            )
            self.registry.set_process(
                self.run_id, name, cause=cause, state=ProcState.EXITED, exit_code=code, ended_at=self.clock()
            )
            if normal_env_end:
                continue
            if name == "trainer" and code == 0:
                return self._trainer_verdict()
            what = "exited" if code >= 0 else "was killed"
            during = " while starting" if starting else ""
            return Verdict(
                RunState.FAILED,
                f"{name} (pid {running.popen.pid}) {what}{during}: {processes.exit_description(code)}."
                + (self._trainer_error() if name == "trainer" else "")
                + (self._env_error() if name == "env" else "")
                + self._log_tail(running.spec),
            )
        return None

    def _trainer_status(self) -> TrainerStatus:
        """The trainer's last status: an empty one while it wrote none, or what of a damaged one
        is readable (a damaged file never stops the supervisor)."""
        return read_trainer_status(self.trainer_status_path).status or TrainerStatus()

    def _trainer_error(self) -> str:
        """What the trainer recorded about its failure, and where to look when it starved."""
        status = self._trainer_status()
        text = f" Trainer error: {status.error}" if status.error else ""
        if status.phase == TrainerPhase.WAITING_FOR_BATCH:
            text += " It was waiting for a batch: check the environment's log (env.log) too."
        return text

    def _trainer_verdict(self) -> Verdict:
        """The trainer exited 0: completed only if its status says it finished its last step."""
        status = self._trainer_status()
        step, num_steps = status.step, status.num_steps
        if status.phase == TrainerPhase.DONE:
            return Verdict(RunState.COMPLETED, f"trainer finished step {step} of {num_steps}")
        if status.phase == TrainerPhase.STOPPED and status.stop_cause:
            # The trainer ended itself (its cost cap): a stop, with the trainer's words.
            return Verdict(RunState.STOPPED, f"{status.stop_cause}; stopped after step {step} of {num_steps}")
        return Verdict(
            RunState.FAILED,
            f"trainer exited 0 without finishing (phase {_phase(status)}, step {step} of {num_steps}"
            f"{', error: ' + status.error if status.error else ''})." + self._log_tail(self._procs["trainer"].spec),
        )

    def _check_trainer_heartbeat(self, started_only: bool = False) -> Verdict | None:
        trainer = self._procs.get("trainer")
        if trainer is None or trainer.ended:
            return None
        status = self._trainer_status()
        if started_only and not status.heartbeat:
            return None
        if status.wandb_url and not self._wandb_url_seen:
            self.registry.update_run(self.run_id, wandb_url=status.wandb_url)
            self._wandb_url_seen = True
        heartbeat = status.heartbeat or 0.0
        last_sign = max(heartbeat, trainer.identity.create_time)
        silent = self.clock() - last_sign
        if silent <= self.policy.heartbeat_timeout_s:
            return None
        return Verdict(
            RunState.FAILED,
            f"trainer (pid {trainer.popen.pid}) hung: no heartbeat in trainer_status.json for {silent:.0f} s "
            f"(limit {self.policy.heartbeat_timeout_s:g} s; last phase {_phase(status)})."
            + self._log_tail(trainer.spec),
        )

    def _check_api(self) -> Verdict | None:
        api = self._procs.get("api")
        if api is None or api.ended:
            return None
        now = self.clock()
        if now - self._api_last_probe < self.policy.api_probe_period_s:
            return None
        self._api_last_probe = now
        if api.spec.ready():
            self._api_last_ok = now
            return None
        if now - self._api_last_ok <= self.policy.api_unresponsive_s:
            return None
        return Verdict(
            RunState.FAILED,
            f"api (pid {api.popen.pid}) hung: {api.spec.ready_description} unanswered for "
            f"{now - self._api_last_ok:.0f} s." + self._log_tail(api.spec),
        )

    def _env_error(self) -> str:
        health = read_env_health(self.trainer_status_path.parent / ENV_HEALTH_FILE)
        if health is None or health.last_error is None:
            return ""
        return f" The environment last raised {health.last_error.sentence()}."

    def _check_env_health(self) -> Verdict | None:
        env = self._procs.get("env")
        if env is None or env.ended:
            return None
        health = read_env_health(self.trainer_status_path.parent / ENV_HEALTH_FILE)
        cause = env_watch.hopeless(health, self.clock(), self.policy.env_fail_streak, self.policy.env_no_score_s)
        return Verdict(RunState.FAILED, cause) if cause else None

    # --- ending -----------------------------------------------------------------------------
    def _stop_requested(self) -> bool:
        if self.stop_signal.is_set():
            return True
        # The registry is the truth: a run someone else moved on (a stop, or a reconciling server
        # that ended it) is not ours to keep going.
        run = self.registry.get_run(self.run_id)
        return run is None or run.state not in (RunState.STARTING, RunState.RUNNING)

    def _end(self, verdict: Verdict) -> RunState:
        if verdict.state == RunState.FAILED:
            # Record the failure first: the cause must be visible at once, not after the others
            # have been stopped.
            self.registry.transition(self.run_id, RunState.FAILED, verdict.cause)
            self._stop_all("stopped because the run failed")
        elif verdict.state == RunState.COMPLETED:
            self._stop_all("stopped because the run completed")
            self.registry.transition(self.run_id, RunState.RUNNING, "all processes ready")
            if not self.registry.transition(self.run_id, RunState.COMPLETED, verdict.cause):
                self.registry.transition(self.run_id, RunState.STOPPED, "stopped on request")
        else:
            self.registry.transition(self.run_id, RunState.STOPPING, verdict.cause)
            self._stop_all("stopped on request")
            requested = verdict.cause.startswith("stop requested")
            ended = "stopped on request" if requested else verdict.cause
            self.registry.transition(self.run_id, RunState.STOPPED, f"{ended}; no process left")
        # A stop requested while the run was failing or completing still ends as stopped.
        self.registry.transition(self.run_id, RunState.STOPPED, "stopped on request; no process left")
        run = self.registry.get_run(self.run_id)
        final = run.state if run else verdict.state
        log.info("run %s: %s (%s)", self.run_id, final, verdict.cause.splitlines()[0])
        return final

    def _stop_all(self, cause: str) -> None:
        """End every process still alive, last started first."""
        for name in reversed(list(self._procs)):
            running = self._procs[name]
            if running.ended:
                continue
            # Our own children: proven by parenthood (and the marker, when the run has one).
            ended = processes.stop(
                running.identity.pid,
                running.identity.pgid,
                running.identity.create_time,
                self.marker,
                self.policy.grace_for(name),
            )
            if ended.note:
                log.warning("run %s: stopping %s: %s", self.run_id, name, ended.note)
            code = ended.exit_code
            if code is None:
                code = running.popen.poll()
            running.exit_code, running.ended = code, True
            self.registry.set_process(
                self.run_id, name, cause=cause, state=ProcState.STOPPED, exit_code=code, ended_at=self.clock()
            )

    def _log_tail(self, spec: ProcessSpec) -> str:
        lines = tail_lines(spec.log_path, LOG_TAIL_LINES)
        if not lines:
            return f" ({spec.name} log is empty: {spec.log_path})"
        return f"\nLast {len(lines)} lines of {spec.name}.log:\n" + "\n".join(lines)
