"""The detached worker of one inference test: `python -m mcp_rl.inference_test --test-dir DIR`.

It runs Atropos `process` mode of the test's environment once per model, at most
`max_parallel` at a time, each in its own folder, session and process group with its own
deadline, and rewrites `summary.json` atomically whenever something changes, so a reader (the
MCP tool, a later server, `rl://tests/{test_id}`) always sees a whole, current answer. A model
that fails or hangs is reported with its log tail; the others go on.

The model `local` is served by the project's own inference server, started here on a free
127.0.0.1 port and stopped when the test ends, whatever happens.

Every child talks to the test's gateway (`gateway.py`) on 127.0.0.1, never to a provider: the
gateway adds each model's request options, counts requests, tokens and cost, backs off, stops a
model at its budget or at a provider error that will not go away, and says why in one line. The
OpenRouter key stays in this process; a child gets only the gateway's token, as OPENAI_API_KEY
in its environment (the openai client reads it there when the config's api_key is null), never
in argv, a config file or a log.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from mcp_rl.atomic import write_text_atomic
from mcp_rl.background import worker_main
from mcp_rl.environments.discovery import declared_env_vars
from mcp_rl.environments.mcp_family.taskfile import keys_needed
from mcp_rl.errors import McpRlError
from mcp_rl.inference_test import report
from mcp_rl.inference_test.gateway import Budgets, Gateway, Lane, Preflight, preflight
from mcp_rl.inference_test.models import (
    LOCAL_SERVER_FILE,
    LOCAL_SERVER_LOG,
    MODEL_CONFIG_FILE,
    MODEL_JSONL,
    MODEL_LOG,
    MODEL_RESULT_FILE,
    SPEC_FILE,
    SUMMARY_FILE,
    ModelResult,
    TestSpec,
    TestState,
    WorkerRecord,
)
from mcp_rl.model_specs import ModelSpec
from mcp_rl.models import resolve_model
from mcp_rl.ports import allocate_ports
from mcp_rl.processes import identify, spawn, stop_group
from mcp_rl.rundir import ENV_HEALTH_FILE, JUDGE_SPEND_FILE, read_env_health
from mcp_rl.settings import SECRET_ENV_VARS, Settings

log = logging.getLogger("mcp_rl.inference_test")

TICK_S = 0.5
HEARTBEAT_S = 2.0
STOP_GRACE_S = 5.0
# Name the local inference server answers to; it serves one model whatever the name.
LOCAL_MODEL_NAME = "local"
# Lines Atropos logs per finished group in process mode (INFO; visible when the env runner
# configures logging) — used only for progress, never for results.
_PROGRESS_MARK = b"Successfully processed group"
_GROUP_RETRY_MARK = b"Failed to process group"
_TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "tokenizer.model",
    "vocab.json",
    "merges.txt",
    "special_tokens_map.json",
)
# Keys a process-mode child must not inherit: it gets at most the one it needs, by name.
_STRIPPED_ENV = (*SECRET_ENV_VARS, "OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_ADMIN_KEY")


# --- the per-model process-mode config --------------------------------------------------------
def process_config(
    spec: TestSpec, model: ModelSpec, model_dir: Path, tokenizer: Path | str, base_url: str
) -> dict[str, Any]:
    """The YAML Atropos `process --config` reads for one model (no secret in it, ever)."""
    env = dict(spec.env_config)
    env.update(
        total_steps=spec.num_steps,
        group_size=spec.group_size,
        use_wandb=spec.use_wandb,
        wandb_name=f"test-{spec.environment.name}-{spec.test_id}-{model.slug}",
        data_path_to_save_groups=str(model_dir / MODEL_JSONL),
        # BaseEnv loads a tokenizer in every mode; only a local folder works offline.
        tokenizer_name=str(tokenizer),
        include_messages=True,
        ensure_scores_are_not_same=False,
    )
    if isinstance(env.get("batch_size"), int) and 0 < env["batch_size"] < spec.group_size:
        env["batch_size"] = spec.group_size
    openai: dict[str, Any] = {
        "base_url": base_url,
        "model_name": model.id if model.provider == "openrouter" else LOCAL_MODEL_NAME,
        "server_type": "openai",
        # null makes the openai client read OPENAI_API_KEY (the gateway's token) from the environment.
        "api_key": None,
        # Upstream pings the server every second with a real (paid) completion when this is on.
        "health_check": False,
        "timeout": max(30, int(spec.model_timeout_s)),
        "num_requests_for_eval": 4,
    }
    return {"env": env, "openai": openai}


def child_env(settings: Settings, gateway_token: str, named: Sequence[str] = (), **extra: str) -> dict[str, str]:
    """A process-mode child's environment (the environment's own code): the allow-list of
    `Settings.user_code_env` with the variables it names (`extra`: our own launch settings), and
    the token of the test's gateway."""
    env = settings.user_code_env(named, base=None, **extra)
    for name in _STRIPPED_ENV:
        if name not in named:
            env.pop(name, None)
    # Environments using managed_server() need this against OpenAI-type endpoints
    # (upstream bug 4): a dummy token tracker that is fine for scoring, not for training.
    env["ATROPOS_ALLOW_DUMMY_MANAGED_SERVER"] = "1"
    if not settings.wandb_enabled:
        env["WANDB_MODE"] = "disabled"
    env["OPENAI_API_KEY"] = gateway_token
    return env


def model_env_names(spec: TestSpec) -> list[str]:
    """The variables a model's environment process gets beyond the allow-list: those its
    environment names, and OpenRouter's key for an MCP task whose judge is a paid model."""
    env = spec.environment
    return declared_env_vars(env.file_path, env.class_name, spec.env_config) + keys_needed(
        spec.env_config.get("task_file")
    )


def choose_tokenizer(configured: str | None, local_model: Path) -> tuple[Path | str, str | None]:
    """The tokenizer the environment loads: the run's base model's when it is available (a local
    folder, or a hub id whose tokenizer is cached or can be fetched now), else the local model's;
    and a note saying so when the base model's could not be used."""
    if not configured or Path(configured).expanduser().resolve() == local_model.resolve():
        return local_model, None
    folder = Path(configured).expanduser()
    if folder.is_dir():
        if any((folder / name).is_file() for name in _TOKENIZER_FILES):
            return folder.resolve(), None
    elif not configured.startswith(("/", ".", "~")):
        problem = _fetch_tokenizer(configured)
        if problem is None:
            return configured, None
        return local_model, (
            f"The run's base model {configured!r}: its tokenizer is not available ({problem}); "
            f"token counts use {local_model.name}'s tokenizer instead."
        )
    return local_model, (
        f"The run's base model {configured!r} is not a local folder with a tokenizer; "
        f"token counts use {local_model.name}'s tokenizer instead."
    )


def _fetch_tokenizer(repo_id: str) -> str | None:
    """None once the tokenizer files of a hub model are in the local cache (fetched now if the
    user's machine may reach the hub), else what went wrong."""
    try:
        # huggingface_hub is heavy: only a run whose model is a hub id needs it
        from huggingface_hub import snapshot_download, try_to_load_from_cache

        if isinstance(try_to_load_from_cache(repo_id, "tokenizer_config.json"), str):
            return None
        # Only the tokenizer's small files, never weights; offline settings make this fail fast.
        snapshot_download(repo_id, allow_patterns=list(_TOKENIZER_FILES), etag_timeout=10)
    except Exception as exc:
        return f"{type(exc).__name__}: {str(exc)[:200]}"
    return (
        None
        if isinstance(try_to_load_from_cache(repo_id, "tokenizer_config.json"), str)
        else "no tokenizer_config.json"
    )


def exit_reason(folder: Path, code: int) -> str:
    """Why a model's environment process failed: the exception it raised and where (recorded by
    mcp_rl.environments.failure_report), else the last exception in its log, else the exit code."""
    health = read_env_health(folder / ENV_HEALTH_FILE)
    if health is not None and health.last_error is not None:
        failed = f" on {health.groups_failed} of {health.groups_failed + health.groups_scored} groups"
        return f"the environment raised {health.last_error.sentence()}{failed}; it exited with code {code}"
    raised = last_exception_line(folder / MODEL_LOG)
    if raised:
        return f"the environment exited with code {code} after: {raised}"
    return f"the environment exited with code {code}"


def last_exception_line(log_path: Path) -> str | None:
    """The last 'SomeError: message' line ending a Python traceback in a log (None: none)."""
    try:
        lines = log_path.read_text(encoding="utf-8", errors="replace").splitlines()[-400:]
    except OSError:
        return None
    found = None
    in_traceback = False
    for line in lines:
        if line.startswith("Traceback (most recent call last)"):
            in_traceback = True
        elif in_traceback and line and not line.startswith((" ", "\t")):
            found, in_traceback = line.strip()[:500], False
    return found


def process_argv(spec: TestSpec, config_path: Path) -> list[str]:
    env = spec.environment
    return [
        sys.executable,
        "-m",
        "mcp_rl.inference_test.child",
        str(env.file_path),
        env.class_name,
        "--project-root",
        str(env.project_root),
        "process",
        "--config",
        str(config_path),
    ]


# --- the local inference server ---------------------------------------------------------------
class LocalServerError(McpRlError):
    pass


@dataclass
class LocalServer:
    """The project's model server for the model `local`; ready once /health answers 200."""

    proc: subprocess.Popen[bytes]
    port: int
    log_path: Path
    deadline: float
    ready: bool = False

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @classmethod
    def spawn(
        cls,
        settings: Settings,
        model_path: Path,
        log_path: Path,
        timeout_s: float,
        adapter: str | None = None,
        record_file: str = LOCAL_SERVER_FILE,
    ) -> LocalServer:
        (port,) = allocate_ports(1)
        env = settings.child_env()
        for name in _STRIPPED_ENV:
            env.pop(name, None)
        argv = [sys.executable, "-m", "mcp_rl.trainer.serve_model", "--model", str(model_path), "--port", str(port)]
        if adapter:  # a run's saved checkpoint: base + its LoRA adapter
            argv += ["--adapter", adapter]
        proc = spawn(argv, log_path, env)
        ident = identify(proc.pid)
        record = WorkerRecord(
            pid=proc.pid, pgid=proc.pid, create_time=ident.create_time if ident else 0.0, started_at=time.time()
        )
        # A reader that finds the worker dead ends the server with this.
        write_text_atomic(log_path.parent / record_file, record.model_dump_json())
        log.info("local model server pid %s on port %s", proc.pid, port)
        return cls(proc=proc, port=port, log_path=log_path, deadline=time.monotonic() + timeout_s)

    def check(self) -> bool:
        """One readiness probe: True once ready.

        Raises:
            LocalServerError: the server exited or missed its deadline (with its log tail).
        """
        if self.ready:
            return True
        code = self.proc.poll()
        if code is not None:
            raise LocalServerError(
                f"the local model server exited ({code}) before it was ready:\n{report.tail_text(self.log_path)}"
            )
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2) as response:
                self.ready = response.status == 200
        except (urllib.error.URLError, OSError):
            pass
        if not self.ready and time.monotonic() > self.deadline:
            raise LocalServerError(f"the local model server was not ready in time:\n{report.tail_text(self.log_path)}")
        if self.ready:
            log.info("local model server ready")
        return self.ready

    def stop(self) -> None:
        stop_group(self.proc.pid, self.proc.pid, None, STOP_GRACE_S)
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass


# --- one model's run ------------------------------------------------------------------------
@dataclass
class ModelRun:
    model: ModelSpec
    folder: Path
    result: ModelResult
    proc: subprocess.Popen[bytes] | None = None
    lane: Lane | None = None
    started: float = 0.0
    deadline: float = 0.0
    _offsets: dict[str, int] = field(default_factory=lambda: {"log": 0, "jsonl": 0})
    _counts: dict[str, int] = field(default_factory=lambda: {"log": 0, "jsonl": 0})

    @property
    def log_path(self) -> Path:
        return self.folder / MODEL_LOG

    def count_progress(self) -> bool:
        """Update steps_done from the log and the JSONL; True if it changed.

        Atropos logs a line per finished group only when INFO logging is on, and buffers its
        JSONL writes: either can lag, so the larger count wins. Progress only, never results.
        """
        marks = self._count_new(self.log_path, "log", _PROGRESS_MARK)
        lines = self._count_new(self.folder / MODEL_JSONL, "jsonl", b"\n")
        if not (marks or lines):
            return False
        self._counts["log"] += marks
        self._counts["jsonl"] += lines
        done = max(self._counts.values())
        if done == self.result.steps_done:
            return False
        self.result = self.result.model_copy(update={"steps_done": done})
        return True

    def _count_new(self, path: Path, key: str, needle: bytes) -> int:
        try:
            with open(path, "rb") as fh:
                fh.seek(self._offsets[key])
                chunk = fh.read()
        except FileNotFoundError:
            return 0
        cut = chunk.rfind(b"\n") + 1  # a partial last line is read next time
        self._offsets[key] += cut
        return chunk[:cut].count(needle)


class TestWorker:
    """Runs one test to the end; `stop` (set by SIGTERM/SIGINT) ends it early and cleanly."""

    __test__ = False  # not a pytest test class

    def __init__(self, test_dir: Path, settings: Settings) -> None:
        self.dir = test_dir
        self.settings = settings
        self.spec = TestSpec.load(test_dir / SPEC_FILE)
        self.stop = threading.Event()
        self.started_at = time.time()
        self.runs = [
            ModelRun(model=m, folder=test_dir / m.slug, result=report.initial_result(self.spec, m, test_dir / m.slug))
            for m in self.spec.models
        ]
        self._last_write = 0.0
        self.gateway = Gateway()
        self.preflight = Preflight({}, [])
        self.tokenizer_note: str | None = None

    # -- summary ---------------------------------------------------------------------------
    def write_summary(self, state: TestState = "running", note: str | None = None) -> None:
        finished = time.time() if state != "running" else None
        for run in self.runs:
            if run.lane is not None and run.result.state == "running":
                run.result = run.result.model_copy(update={"usage": run.lane.snapshot()})
        result = report.build_result(
            self.spec,
            [r.result for r in self.runs],
            self.dir,
            self.started_at,
            state,
            finished,
            note,
            tokenizer_note=self.tokenizer_note,
        )
        result.dump(self.dir / SUMMARY_FILE)
        self._last_write = time.monotonic()

    def _finish(self, run: ModelRun, state: str, error: str | None = None) -> None:
        now = time.time()
        code = run.proc.returncode if run.proc is not None else None
        groups, bad = report.read_groups(run.folder / MODEL_JSONL)
        result = report.score_groups(run.result, groups, bad)
        usage = None
        notes: list[str] = []
        if run.lane is not None:
            run.lane.close(f"the model {state}")
            usage = run.lane.snapshot()
            if state == "failed" and error and error.startswith("the environment exited") and usage.last_error:
                error = f"{error}; the provider's last error was {usage.last_error}"
            if usage.empty_answers and state == "succeeded":
                fix = (
                    f" (reasoning used the budget); set `reasoning` or raise `min_max_tokens` for {run.model.id} in "
                    "configs/test_models.yaml"
                    if run.lane.remote
                    else ""
                )
                notes.append(
                    f"{usage.empty_answers} of {usage.empty_answers + usage.answers} answers were empty, cut at "
                    f"max_tokens={run.lane.last_max_tokens}{fix}."
                )
        if state == "succeeded" and not groups:
            state, error = "failed", "the environment exited without writing any scored group"
        if state != "succeeded":
            result = result.model_copy(update={"log_tail": report.tail_text(run.log_path)})
        result = result.model_copy(
            update={
                "state": state,
                "error": error,
                "exit_code": code,
                "finished_at": now,
                "elapsed_s": round(now - run.started, 2) if run.started else None,
                "steps_done": max(result.steps_done, len(groups)),
                "usage": usage,
                "notes": [*result.notes, *notes],
            }
        )
        run.result = result
        run.folder.mkdir(parents=True, exist_ok=True)
        write_text_atomic(run.folder / MODEL_RESULT_FILE, result.model_dump_json(indent=2))
        log.info("model %s: %s%s", run.model.id, state, f" ({error})" if error else "")

    def _spawn_server(self, model: ModelSpec, local_model: Path) -> LocalServer:
        """The local model server for `model`: the local model, or a run checkpoint's base + adapter."""
        if model.adapter is None:
            return LocalServer.spawn(
                self.settings, local_model, self.dir / LOCAL_SERVER_LOG, self.spec.local_server_timeout_s
            )
        return LocalServer.spawn(
            self.settings,
            Path(model.base_model or local_model),
            self.dir / f"local_server-{model.slug}.log",
            self.spec.local_server_timeout_s,
            adapter=model.adapter,
            record_file=f"local_server-{model.slug}.json",
        )

    def _lane(self, run: ModelRun, local: LocalServer | None) -> Lane:
        model, spec = run.model, self.spec
        planned = spec.num_steps * spec.group_size
        remote = model.provider == "openrouter"
        key = self.settings.openrouter_api_key
        return Lane(
            model,
            self.spec.openrouter_base_url if remote or local is None else local.base_url,
            key.get_secret_value() if remote and key is not None else None,
            Budgets(requests=model.request_budget or 2 * planned, tokens=model.token_budget or 4096 * 2 * planned),
            # A whole group of empty answers and not one with content: more of the same would not help.
            empty_limit=max(2, spec.group_size),
            request_timeout_s=spec.model_timeout_s,
            known_ids=self.preflight.known_ids,
        )

    def _start(self, run: ModelRun, tokenizer: Path | str, local: LocalServer | None) -> None:
        run.folder.mkdir(parents=True, exist_ok=True)
        run.lane = self._lane(run, local)
        self.gateway.add(run.lane)
        config = process_config(self.spec, run.model, run.folder, tokenizer, self.gateway.base_url(run.model.slug))
        config_path = run.folder / MODEL_CONFIG_FILE
        write_text_atomic(config_path, yaml.safe_dump(config, sort_keys=False))
        run.started = time.time()
        run.deadline = time.monotonic() + self.spec.model_timeout_s
        run.proc = spawn(
            process_argv(self.spec, config_path),
            run.log_path,
            child_env(
                self.settings,
                self.gateway.token,
                model_env_names(self.spec),
                # an MCP task's paid judge: one spend file for every model's process, so the
                # task's judge.max_cost_usd holds over the whole test
                MCP_RL_JUDGE_SPEND_FILE=str(self.dir / JUDGE_SPEND_FILE),
            ),
            cwd=run.folder,
        )
        ident = identify(run.proc.pid)
        run.result = run.result.model_copy(
            update={
                "state": "running",
                "started_at": run.started,
                "pid": run.proc.pid,
                "pid_create_time": ident.create_time if ident else None,
            }
        )
        log.info("model %s: started pid %s", run.model.id, run.proc.pid)

    def _rejections(self, run: ModelRun) -> str:
        """What the environment made of the model's answers, if it rejected any groups ('' if not)."""
        try:
            rejected = run.log_path.read_bytes().count(_GROUP_RETRY_MARK)
        except FileNotFoundError:
            return ""
        if not rejected:
            return ""
        # Atropos retries forever when the environment returns no group for an item.
        return (
            f"; {run.result.steps_done} of {self.spec.num_steps} groups scored, the environment rejected {rejected} "
            "groups built from this model's answers (often empty or unparseable completions: see samples and the log)"
        )

    def _timeout_reason(self, run: ModelRun) -> str:
        return f"no result within {self.spec.model_timeout_s:.0f} s; killed" + self._rejections(run)

    def _stopped_reason(self, run: ModelRun, reason: str) -> str:
        """The lane's reason, with what the environment made of the answers it did get."""
        rejections = self._rejections(run)
        return reason.rstrip(".") + rejections if rejections else reason

    def _kill(self, run: ModelRun) -> None:
        if run.proc is None:
            return
        stop_group(run.proc.pid, run.proc.pid, None, STOP_GRACE_S)
        try:
            run.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass

    def _check_remote(self, pending: list[ModelRun]) -> None:
        """Before any paid call: unknown ids and a refused key end those models here."""
        remote = [r for r in pending if r.model.provider == "openrouter"]
        if not remote:
            return
        key = self.settings.openrouter_api_key
        self.preflight = preflight(
            self.spec.openrouter_base_url, key.get_secret_value() if key else None, [r.model.id for r in remote]
        )
        for run in remote:
            cause = self.preflight.causes.get(run.model.id)
            if cause:
                pending.remove(run)
                self._finish(run, "failed", cause)

    # -- the loop --------------------------------------------------------------------------
    def run(self) -> TestState:
        """Run every model; returns the test's final state."""
        self.write_summary()
        servers: dict[str, LocalServer] = {}  # by ModelSpec.server_key
        pending = list(self.runs)
        running: list[ModelRun] = []
        final_state: TestState = "completed"
        note: str | None = None
        try:
            self.gateway.start()
            try:
                local_model = resolve_model(self.settings, self.spec.local_model)
            except Exception as exc:
                raise LocalServerError(f"cannot load the local model/tokenizer: {exc}") from exc
            tokenizer, self.tokenizer_note = choose_tokenizer(self.spec.tokenizer, local_model)
            self.spec = self.spec.model_copy(update={"tokenizer": str(tokenizer)})
            self._check_remote(pending)
            for run in pending:
                # Load while the remote models already run; local ones start once theirs is ready.
                # The local model and each run checkpoint get their own server.
                key = run.model.server_key
                if run.model.provider == "local" and key not in servers:
                    servers[key] = self._spawn_server(run.model, local_model)
            while (pending or running) and not self.stop.is_set():
                changed = False
                for key, server in list(servers.items()):
                    if server.ready:
                        continue
                    try:
                        server.check()
                    except LocalServerError as exc:
                        for run in [r for r in pending if r.model.provider == "local" and r.model.server_key == key]:
                            pending.remove(run)
                            self._finish(run, "failed", str(exc))
                        server.stop()
                        del servers[key]
                        changed = True

                def server_of(run: ModelRun) -> LocalServer | None:
                    return servers.get(run.model.server_key) if run.model.provider == "local" else None

                def startable_now(run: ModelRun) -> bool:
                    server = server_of(run)
                    return run.model.provider != "local" or (server is not None and server.ready)

                startable = [r for r in pending if startable_now(r)]
                while startable and len(running) < self.spec.max_parallel:
                    run = startable.pop(0)
                    pending.remove(run)
                    self._start(run, tokenizer, server_of(run))
                    running.append(run)
                    changed = True
                for run in list(running):
                    assert run.proc is not None
                    changed |= run.count_progress()
                    code = run.proc.poll()
                    stop = run.lane.stop if run.lane is not None else None
                    if stop is not None and code != 0:  # the lane knows why better than an exit code
                        self._kill(run)
                        running.remove(run)
                        self._finish(run, stop.state, self._stopped_reason(run, stop.reason))
                        changed = True
                    elif code is not None:
                        running.remove(run)
                        if code == 0:
                            self._finish(run, "succeeded")
                        else:
                            self._finish(run, "failed", exit_reason(run.folder, code))
                        changed = True
                    elif time.monotonic() > run.deadline:
                        self._kill(run)
                        running.remove(run)
                        self._finish(run, "timed_out", self._timeout_reason(run))
                        changed = True
                for key, server in list(servers.items()):
                    if not any(r.model.provider == "local" and r.model.server_key == key for r in [*pending, *running]):
                        server.stop()  # done with it: give its CPU and memory back now
                        del servers[key]
                if changed or time.monotonic() - self._last_write > HEARTBEAT_S:
                    self.write_summary()
                self.stop.wait(TICK_S)
            if self.stop.is_set() and (pending or running):
                final_state, note = "cancelled", None
                for run in running:
                    self._kill(run)
                    self._finish(run, "cancelled", "the test was cancelled")
                for run in pending:
                    self._finish(run, "cancelled", "the test was cancelled before this model started")
        except LocalServerError as exc:
            final_state, note = "failed", str(exc).splitlines()[0]
            for run in [*running, *pending]:
                self._kill(run)
                self._finish(run, "failed", str(exc))
        except BaseException as exc:
            final_state, note = "failed", f"the test worker crashed: {exc!r}"
            log.exception("worker crashed")
            for run in [*running, *pending]:
                self._kill(run)
                if run.result.state not in ("succeeded", "failed", "timed_out", "over_budget"):
                    self._finish(run, "failed", note)
            raise
        finally:
            for server in servers.values():
                server.stop()
            self.gateway.stop()
            self.write_summary(final_state, note)
        return final_state


def main(argv: list[str] | None = None) -> int:
    return worker_main(
        argv,
        module="mcp_rl.inference_test",
        description=__doc__.splitlines()[0],
        make=TestWorker,
        succeeded=("completed",),
        folder_flag="--test-dir",
    )
