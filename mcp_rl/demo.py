"""`mcp-rl demo`: the embedded default end to end, through a real MCP client over stdio.

The demo is an MCP client like any agent's: it starts `python -m mcp_rl serve` as a subprocess
and calls the same tools in the documented order (list, select, edit, smoke-test, train, watch,
results). It uses a state directory of its own, the local backend and the embedded model, and
never a key (keys in the environment are not passed to its server).

Nothing of the demo outlives it: on success the run has ended by itself; on Ctrl-C (or SIGTERM)
the run is stopped with rl_stop_training, the server is closed, and any process still working
in the demo's state directory (an inference-test worker, say) has its group ended. The demo
then checks that nothing is left and says so.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any, TextIO

import anyio
import psutil
from mcp import Client, StdioServerParameters
from pydantic import BaseModel, ConfigDict

from mcp_rl.models import COMPLETE_MARKER, default_model_dir, resolve_model
from mcp_rl.processes import stop
from mcp_rl.settings import SECRET_ENV_VARS, Settings

ENVIRONMENT = "arithmetic"
# The shipped local defaults (30 steps of 8 problems x 4 answers): the run ends with a held-out
# gain at p < 0.01 in most runs (README "Did it learn?"); 6 steps of 2 problems did not prove one.
DEFAULT_STEPS = 30
# --steps N: a short run, small enough for a test on a 2-core CPU.
RUN_EDITS = {"batch_size": 8, "group_size": 4}
SMOKE_TEST = {"models": ["local"], "num_steps": 1, "group_size": 4}
STATUS_POLL_S = 1.0
RUN_DEADLINE_S = 45 * 60.0
TEST_DEADLINE_S = 10 * 60.0
STOP_DEADLINE_S = 120.0
SWEEP_GRACE_S = 5.0
BAR_WIDTH = 24
TERMINAL = {"completed", "failed", "stopped"}
# Environment variables that would change what the demo shows; it is the embedded default.
DROPPED_ENV = (*SECRET_ENV_VARS, "MCP_RL_ENV_PATHS", "MCP_RL_HOME", "WANDB_MODE")


class DemoOptions(BaseModel):
    model_config = ConfigDict(arbitrary_types_allowed=True)

    home: Path | None = None
    steps: int | None = None


class DemoFailed(Exception):
    """A step of the demo did not work; the message says which and why."""


class Interrupted(Exception):
    """Ctrl-C or SIGTERM arrived."""


class Printer:
    def __init__(self, out: TextIO) -> None:
        self.out = out

    def line(self, text: str = "") -> None:
        self.out.write(text + "\n")
        self.out.flush()

    def step(self, number: int, total: int, text: str) -> None:
        self.line(f"[{number}/{total}] {text}")

    def detail(self, text: str) -> None:
        self.line(f"      {text}")


# --- set-up ------------------------------------------------------------------------------------
def demo_home(options: DemoOptions, user: Settings) -> Path:
    if options.home is not None:
        home = Path(options.home).expanduser().resolve()
        if home.exists() and any(home.iterdir()):
            raise DemoFailed(
                f"{home} is not empty; give --home a new or empty folder (the demo starts from a clean state)."
            )
    else:
        home = user.home / "demos" / datetime.now().strftime("%Y%m%d-%H%M%S")
    home.mkdir(parents=True, exist_ok=True)
    return home


def prepare_model(user: Settings, printer: Printer) -> Path:
    """The embedded model folder, converted once into the user's model cache (reused by every demo)."""
    if user.model_path is None and not (default_model_dir(user) / COMPLETE_MARKER).is_file():
        printer.line(f"Converting the embedded model once into {user.models_dir} (about a minute) ...")
    return resolve_model(user, "default")


def server_env(home: Path, model: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in DROPPED_ENV}
    env.update(
        MCP_RL_HOME=str(home),
        MCP_RL_MODEL=str(model),
        # The demo polls every second to draw its progress bar; agents are rate-limited instead.
        MCP_RL_STATUS_MIN_INTERVAL="0",
        WANDB_MODE="disabled",
    )
    return env


# --- talking to the server ---------------------------------------------------------------------
async def call(client: Any, tool: str, args: dict[str, Any] | None = None, **kwargs: Any) -> dict[str, Any]:
    result = await client.call_tool(tool, args or {}, **kwargs)
    if result.is_error:
        text = " ".join(getattr(c, "text", "") for c in result.content)
        raise DemoFailed(f"{tool} failed: {text}")
    return result.structured_content or {}


def bar(done: int, total: int) -> str:
    filled = round(BAR_WIDTH * done / total) if total else 0
    return "[" + "#" * filled + "." * (BAR_WIDTH - filled) + "]"


def _fmt(value: Any, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


class Demo:
    """The demo's steps, in order. `run_id` and `test_id` are kept for the clean-up."""

    TOTAL = 7

    def __init__(self, client: Any, printer: Printer, steps: int, home: Path, short: bool = False) -> None:
        self.client = client
        self.p = printer
        self.steps = steps
        self.short = short  # --steps N given: a short run of N small steps
        self.home = home
        self.run_id: str | None = None
        self.run_state: str | None = None
        self.png: Path | None = None

    async def connect(self) -> None:
        tools = await self.client.list_tools()
        info = self.client.server_info
        self.p.step(
            1,
            self.TOTAL,
            f"Connected to `mcp-rl serve` over stdio: {info.name} {info.version}, "
            f"protocol {self.client.protocol_version}, {len(tools.tools)} tools",
        )

    async def environments(self) -> None:
        found = await call(self.client, "rl_list_environments")
        self.p.step(2, self.TOTAL, f"rl_list_environments: {found['count']} found")
        for env in found["environments"]:
            description = (env.get("description") or "").strip().splitlines()
            self.p.detail(f"{env['name']:<14} {description[0][:70] if description else ''}")
        if ENVIRONMENT not in {e["name"] for e in found["environments"]}:
            raise DemoFailed(f"The bundled environment {ENVIRONMENT!r} was not found (searched {found['searched']}).")

    async def configure(self) -> None:
        selected = await call(self.client, "rl_select_environment", {"name": ENVIRONMENT})
        self.p.step(
            3,
            self.TOTAL,
            f"rl_select_environment({ENVIRONMENT!r}): {selected['configurable_fields']} configurable fields",
        )
        edits = {"total_steps": self.steps, **RUN_EDITS} if self.short else {}
        for field, value in edits.items():
            await call(self.client, "rl_edit_config", {"field": field, "value": value})
        if edits:
            self.p.detail("rl_edit_config: " + ", ".join(f"{k}={v}" for k, v in edits.items()) + " (a short run)")
        else:
            self.p.detail("the shipped defaults: no rl_edit_config needed")
        current = await call(self.client, "rl_get_current_config")
        options = {o["name"]: o.get("current_value") for o in current.get("run_options", [])}
        self.p.detail(
            f"rl_get_current_config: backend {current['backend']}, base model {options.get('base_model')}, "
            f"learning rate {options.get('learning_rate')}, LoRA rank {options.get('lora_rank')}"
        )

    async def smoke_test(self) -> None:
        self.p.step(
            4,
            self.TOTAL,
            f"rl_test_inference(models=['local'], num_steps={SMOKE_TEST['num_steps']}, "
            f"group_size={SMOKE_TEST['group_size']}): the local model answers a few prompts ...",
        )
        last: list[str] = []

        async def progress(done: float, total: float | None, message: str | None) -> None:
            if message and message != (last[-1] if last else None):
                last.append(message)
                self.p.detail(f"... {message}")

        result = await call(self.client, "rl_test_inference", dict(SMOKE_TEST), progress_callback=progress)
        deadline = time.monotonic() + TEST_DEADLINE_S
        while result.get("state") == "running":
            if time.monotonic() > deadline:
                raise DemoFailed(
                    f"the smoke test did not finish in {TEST_DEADLINE_S / 60:.0f} min; see {result.get('resource')}"
                )
            await anyio.sleep(STATUS_POLL_S)  # the test runs in the background: poll its resource
            read = await self.client.read_resource(result["resource"])
            result = json.loads(read.contents[0].text)
        model = result["models_tested"][0] if result.get("models_tested") else {}
        summary = result.get("summary", {})
        self.p.detail(
            f"{model.get('model')}: {model.get('state')}, accuracy {_fmt(model.get('accuracy'), 2)} "
            f"({model.get('correct_completions')}/{model.get('total_completions')} correct), "
            f"mean score {_fmt(model.get('mean_score'))}"
        )
        if not summary.get("environment_working"):
            raise DemoFailed(
                f"the smoke test says the environment does not work: {result.get('message')} "
                f"{model.get('error') or ''}".strip()
            )
        self.p.detail("the environment loads, prompts, parses and scores: ready to train")

    async def train(self) -> None:
        started = await call(self.client, "rl_start_training")
        self.run_id = started["run_id"]
        self.run_state = "starting"
        self.p.step(
            5,
            self.TOTAL,
            f"rl_start_training: run {self.run_id} ({started['backend']} backend, "
            f"{started['base_model']}, {started['num_steps']} steps)",
        )
        self.p.detail("starting the Atropos API, the trainer (loads the model) and the environment ...")

    async def watch(self) -> None:
        assert self.run_id is not None
        self.p.step(6, self.TOTAL, f"rl_check_status({self.run_id!r}) every {STATUS_POLL_S:.0f} s:")
        shown_step = 0
        shown_phase = None
        started = time.monotonic()
        deadline = started + RUN_DEADLINE_S
        while True:
            status = await call(self.client, "rl_check_status", {"run_id": self.run_id})
            self.run_state = status["status"]
            metrics = status.get("metrics") or {}
            step = metrics.get("step") or 0
            total = metrics.get("num_steps") or self.steps
            phase = status.get("trainer_phase")
            if step > shown_step:
                shown_step = step
                self.p.line(
                    f"  step {step:>2}/{total} {bar(step, total)}  reward {_fmt(metrics.get('reward_mean'))}"
                    f"  loss {_fmt(metrics.get('loss'), 4)}  ({time.monotonic() - started:.0f} s)"
                )
            elif phase != shown_phase and phase and not step:
                self.p.detail(
                    f"{status['status']}: trainer {phase.replace('_', ' ')} ({time.monotonic() - started:.0f} s)"
                )
            shown_phase = phase
            if self.run_state in TERMINAL:
                if self.run_state != "completed":
                    raise DemoFailed(
                        f"run {self.run_id} {self.run_state}: {status.get('error') or status.get('message')}"
                    )
                return
            if time.monotonic() > deadline:
                raise DemoFailed(f"run {self.run_id} did not finish in {RUN_DEADLINE_S / 60:.0f} min")
            await anyio.sleep(STATUS_POLL_S)  # poll interval of a run that keeps going on its own

    async def results(self) -> None:
        assert self.run_id is not None
        result = await self.client.call_tool("rl_get_results", {"run_id": self.run_id})
        if result.is_error:
            raise DemoFailed("rl_get_results failed: " + " ".join(getattr(c, "text", "") for c in result.content))
        data = result.structured_content or {}
        self.p.step(
            7,
            self.TOTAL,
            f"rl_get_results({self.run_id!r}): {data.get('state')}, "
            f"{data.get('steps_completed')}/{data.get('num_steps')} steps",
        )
        reward = (data.get("metrics") or {}).get("reward/mean")
        history = data.get("history") or []
        if reward:
            first = history[0].get("reward_mean") if history else None
            self.p.detail(
                f"reward/mean: first {_fmt(first)} -> final {_fmt(reward['final'])} "
                f"(best {_fmt(reward['best'])} at step {reward['best_step']})"
            )
        for point in history:
            self.p.detail(
                f"  step {point['step']:>2}  reward {_fmt(point.get('reward_mean'))}  loss {_fmt(point.get('loss'), 4)}"
            )
        held_out = data.get("held_out") or {}
        if held_out.get("sentence"):
            # Did it learn: the base against the trained model on the same held-out problems.
            self.p.detail(f"held-out: {held_out['sentence']}")
        weights = data.get("weights") or {}
        if weights.get("sampler_weights"):
            self.p.detail(f"weights (LoRA adapter): {weights['sampler_weights']}")
        images = [c for c in result.content if getattr(c, "type", None) == "image"]
        if not images:
            raise DemoFailed("rl_get_results returned no reward plot")
        self.png = self.home / f"reward_curve_{self.run_id}.png"
        self.png.write_bytes(base64.b64decode(images[0].data))
        self.p.detail(f"reward curve (PNG): {self.png}")


# --- clean-up ----------------------------------------------------------------------------------
def demo_processes(home: Path) -> list[Any]:
    """Live processes working in the demo's state directory (by cwd or command line), not us."""
    mine = {os.getpid(), *(p.pid for p in psutil.Process().parents())}
    text = str(home)
    found = []
    for proc in psutil.process_iter(["pid", "cmdline", "cwd", "status", "environ"]):
        info = proc.info
        if info["pid"] in mine or info["status"] == psutil.STATUS_ZOMBIE:
            continue
        environ = info.get("environ") or {}
        if (
            (info["cwd"] or "").startswith(text)
            or text in " ".join(info["cmdline"] or [])
            or environ.get("MCP_RL_HOME") == text
        ):
            found.append(proc)
    return found


def sweep(home: Path) -> list[str]:
    """End the process group of anything still working in `home`; return what was ended (pid and
    command, so that the person reading knows what it was)."""
    own_group = os.getpgid(0)
    ended = []
    for proc in demo_processes(home):
        try:
            pgid = os.getpgid(proc.pid)
            create_time = proc.create_time()
        except (ProcessLookupError, OSError, Exception):
            continue
        # Never our own group (a test runner or shell may share it with us): the process alone.
        # Signalled only when proven the demo's: its environment names the demo's state directory.
        outcome = stop(
            proc.pid,
            pgid if pgid != own_group else proc.pid,
            create_time,
            str(home),
            SWEEP_GRACE_S,
            marker_env="MCP_RL_HOME",
        )
        if outcome.proven:
            command = " ".join(proc.info.get("cmdline") or [])[:80] or "?"
            ended.append(f"{proc.pid} ({command})")
    return ended


async def stop_run(client: Any, demo: Demo, printer: Printer) -> None:
    if demo.run_id is None or demo.run_state in TERMINAL:
        return
    printer.line(f"Stopping run {demo.run_id} with rl_stop_training ...")
    with anyio.move_on_after(STOP_DEADLINE_S):
        stopped = await client.call_tool("rl_stop_training", {"run_id": demo.run_id})
        data = stopped.structured_content or {}
        printer.detail(data.get("message") or " ".join(getattr(c, "text", "") for c in stopped.content))


# --- the whole demo ----------------------------------------------------------------------------
async def _run(options: DemoOptions, printer: Printer) -> int:
    user = Settings.from_env()
    steps = options.steps or DEFAULT_STEPS
    if steps < 1:
        raise DemoFailed("--steps must be at least 1")
    home = demo_home(options, user)
    began = time.monotonic()
    printer.line("mcp-rl demo: the embedded default, end to end through a real MCP client (no keys needed)")
    printer.line(f"state directory: {home}")
    model = prepare_model(user, printer)
    printer.line(f"model: {model}")
    printer.line("")

    params = StdioServerParameters(
        command=sys.executable, args=["-m", "mcp_rl", "serve"], env=server_env(home, model), cwd=str(home)
    )
    outcome = 0
    left: list[int] = []
    interrupted = False
    demo: Demo | None = None

    async with anyio.create_task_group() as signals_tg:
        work = anyio.CancelScope()

        async def on_signals() -> None:
            nonlocal interrupted
            with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as received:
                async for _ in received:
                    if not interrupted:
                        interrupted = True
                        printer.line("\nInterrupted: stopping the demo (this takes a few seconds) ...")
                        work.cancel()
                    else:
                        printer.line("Still cleaning up so that nothing is left running; please wait.")

        signals_tg.start_soon(on_signals)
        try:
            async with Client(params, read_timeout_seconds=300) as client:
                demo = Demo(client, printer, steps, home, short=options.steps is not None)
                with work:
                    try:
                        await demo.connect()
                        await demo.environments()
                        await demo.configure()
                        await demo.smoke_test()
                        await demo.train()
                        await demo.watch()
                        await demo.results()
                    except DemoFailed as exc:
                        printer.line(f"\nThe demo stopped: {exc}")
                        outcome = 1
                with anyio.CancelScope(shield=True):
                    await stop_run(client, demo, printer)
        except DemoFailed as exc:
            printer.line(f"\nThe demo stopped: {exc}")
            outcome = 1
        except Exception as exc:  # the server died or the connection broke: say so, then clean up
            printer.line(f"\nThe demo stopped: lost the MCP server ({type(exc).__name__}: {exc}).")
            outcome = 1
        finally:
            with anyio.CancelScope(shield=True):
                ended = await anyio.to_thread.run_sync(sweep, home)
                if ended:
                    printer.line(f"Ended {len(ended)} leftover process(es) of the demo: {'; '.join(ended)}")
                left = [p.pid for p in await anyio.to_thread.run_sync(demo_processes, home)]
            signals_tg.cancel_scope.cancel()

    elapsed = time.monotonic() - began
    printer.line("")
    if left:
        printer.line(f"Processes of the demo still alive: {left}")
        return 1
    if interrupted:
        printer.line(f"Interrupted after {elapsed:.0f} s. Nothing of the demo is left running. State: {home}")
        return 130
    if outcome == 0 and demo is not None and demo.png is not None:
        printer.line(f"Done in {elapsed // 60:.0f} min {elapsed % 60:.0f} s. Nothing of the demo is left running.")
        printer.line(f"Reward curve: {demo.png}")
        printer.line(f"See its runs: MCP_RL_HOME={home} mcp-rl runs list")
        printer.line(
            'Use it from your agent: see "Use it from an MCP client" in the README (e.g. `claude mcp add ... -- mcp-rl serve`).'
        )
        return 0
    printer.line(
        f"The demo did not finish ({elapsed:.0f} s). Its state is kept in {home}; `mcp-rl doctor` checks the machine."
    )
    return outcome or 1


def run_demo(options: DemoOptions, out: TextIO | None = None) -> int:
    printer = Printer(out or sys.stdout)
    try:
        return anyio.run(_run, options, printer)
    except DemoFailed as exc:
        printer.line(f"mcp-rl demo: {exc}")
        return 1
