"""Settings: environment variables, the state directory and where things live in it.

Everything the rest of mcp-rl needs to know about the machine comes through one `Settings`
object, built once (by the server's lifespan, the CLI, the supervisor or the trainer) and passed
down explicitly. Secrets are held as `SecretStr` so an accidental `repr` or log line shows
`**********`, and they are handed to child processes only through their environment.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, model_validator

from mcp_rl import redact
from mcp_rl.errors import UserError
from mcp_rl.home import cache_dir, home_dir
from mcp_rl.urls import AllowedHost, parse_allowed_hosts

PACKAGE_DIR = Path(__file__).resolve().parent

# Names of the secrets we read. They may reach a child's environment, never argv, logs or files.
SECRET_ENV_VARS = ("TINKER_API_KEY", "WANDB_API_KEY", "OPENROUTER_API_KEY", "MCP_RL_TOKEN", "HF_TOKEN")

# What user code (a task's or environment's own code, wherever mcp-rl runs it) receives from the
# server's environment: what a Python program needs to run, install and reach the network as the
# user set it up, and nothing else. Keys are not here: a task names the ones it needs (its
# `env_vars`, see mcp_rl.task), and gets exactly those (`Settings.user_code_env`).
USER_CODE_ENV_NAMES = frozenset(
    {
        "PATH",
        "HOME",
        "USER",
        "LOGNAME",
        "SHELL",
        "TERM",
        "LANG",
        "LANGUAGE",
        "TZ",
        "TMPDIR",
        "TEMP",
        "TMP",
        "PWD",
        "SSL_CERT_FILE",
        "SSL_CERT_DIR",
        "REQUESTS_CA_BUNDLE",
        "CURL_CA_BUNDLE",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "NO_PROXY",
        "ALL_PROXY",
        "http_proxy",
        "https_proxy",
        "no_proxy",
        "all_proxy",
        "VIRTUAL_ENV",
        "PYTHONPATH",
        "PYTHONHASHSEED",
        "PYTHONDONTWRITEBYTECODE",
        "PYTHONWARNINGS",
        "PYTHONIOENCODING",
        "PYTHONUTF8",
        # the user's Hugging Face set-up (caches, mirror, offline mode), never its token
        "HF_HOME",
        "HF_HUB_CACHE",
        "HF_DATASETS_CACHE",
        "HF_ENDPOINT",
        "HF_HUB_OFFLINE",
        "HF_DATASETS_OFFLINE",
        "TRANSFORMERS_OFFLINE",
        "TRANSFORMERS_CACHE",
        "HF_HUB_DISABLE_TELEMETRY",
        "HF_HUB_ENABLE_HF_TRANSFER",
        "TORCH_HOME",
        "OMP_NUM_THREADS",
        "MKL_NUM_THREADS",
        "OPENBLAS_NUM_THREADS",
        "CUDA_VISIBLE_DEVICES",
        "TOKENIZERS_PARALLELISM",
        # W&B's settings (not its key): an Atropos environment logs its rollouts to W&B itself
        "WANDB_MODE",
        "WANDB_DIR",
        "WANDB_ENTITY",
        "WANDB_PROJECT",
        "WANDB_BASE_URL",
        "WANDB_SILENT",
        "MCP_RL_HOME",
        # our identity marker (mcp_rl.processes): a job's children stay provably its own
        "MCP_RL_MARKER",
    }
)
# Families of settings a program needs to install packages or find libraries (pip, uv, conda,
# locale); a name in one of them that looks like a credential is still kept out.
USER_CODE_ENV_PREFIXES = ("LC_", "PIP_", "UV_", "CONDA_", "XDG_", "LD_LIBRARY_PATH", "NIX_")
_CREDENTIAL_WORDS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH")


# Keys a process of ours holds as SecretStr and passes to its clients explicitly: taken out of its
# os.environ before it runs a task's code in-process (`hide_keys_from_task_code`). Not W&B's nor
# the Hub's: wandb and huggingface_hub read theirs from the environment (the trainer starts W&B
# after the step-0 evaluation; an evaluation worker may load a gated tokenizer after it).
_HIDDEN_FROM_TASK_CODE = ("TINKER_API_KEY", "OPENROUTER_API_KEY", "MCP_RL_TOKEN")


def hide_keys_from_task_code(named: Iterable[str] = ()) -> list[str]:
    """Remove mcp-rl's keys (but those the task names) from this process's environment, before
    a task's code runs in it (the trainer's and the evaluation worker's held-out evaluation):
    their clients were given the keys explicitly. Returns the names removed."""
    keep = set(named)
    return [name for name in _HIDDEN_FROM_TASK_CODE if name not in keep and os.environ.pop(name, None) is not None]


def _user_code_may_see(name: str) -> bool:
    if name in USER_CODE_ENV_NAMES:
        return True
    if not name.startswith(USER_CODE_ENV_PREFIXES):
        return False
    return not any(word in name.upper() for word in _CREDENTIAL_WORDS)


def configs_dir() -> Path:
    """The folder of shipped YAML configs: inside the wheel, or the checkout's `configs/`."""
    packaged = PACKAGE_DIR / "configs"
    return packaged if packaged.is_dir() else PACKAGE_DIR.parent / "configs"


def bundled_environments_dir() -> Path:
    return PACKAGE_DIR / "environments" / "bundled"


def _paths(value: str | None) -> list[Path]:
    if not value:
        return []
    return [Path(p).expanduser() for p in value.split(os.pathsep) if p.strip()]


LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
# A W&B look-up answers inside one tool call: at most this long, and at most half the budget.
DEFAULT_WANDB_TIMEOUT_S = 8.0
# The variable behind each bounded field, so a refused value is reported by the name the user set.
ENV_NAMES = {
    "tool_time_budget_s": "MCP_RL_TOOL_TIME_BUDGET",
    "introspect_worker_idle_s": "MCP_RL_INTROSPECT_WORKER_IDLE",
    "local_batch_window_s": "MCP_RL_LOCAL_BATCH_WINDOW",
    "wandb_timeout_s": "MCP_RL_WANDB_TIMEOUT",
    "api_ready_s": "MCP_RL_API_READY_TIMEOUT",
    "trainer_ready_s": "MCP_RL_TRAINER_READY_TIMEOUT",
    "env_ready_s": "MCP_RL_ENV_READY_TIMEOUT",
    "heartbeat_timeout_s": "MCP_RL_HEARTBEAT_TIMEOUT",
    "api_unresponsive_s": "MCP_RL_API_UNRESPONSIVE_TIMEOUT",
    "stop_grace_s": "MCP_RL_STOP_GRACE",
    "trainer_stop_grace_s": "MCP_RL_TRAINER_STOP_GRACE",
    "confirm_above_usd": "MCP_RL_CONFIRM_ABOVE_USD",
}

# Bounds of MCP_RL_WATCH_INTERVAL (values outside are clamped to them).
MIN_WATCH_INTERVAL_S = 0.1
MAX_WATCH_INTERVAL_S = 3600.0


def _words(value: str | None) -> list[str]:
    """A list written with commas and/or spaces."""
    return (value or "").replace(",", " ").split()


def _hosts(env: Mapping[str, str], name: str) -> list[str]:
    """A list of allowed service hosts, each checked now (a typo is named at start, not ignored)."""
    words = _words(env.get(name))
    parse_allowed_hosts(words, name)
    return words


def _float(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = float(raw)
    except ValueError as exc:
        raise UserError(f"{name} must be a number of seconds, got {raw!r}") from exc
    if not math.isfinite(value):
        raise UserError(f"{name} must be a finite number of seconds, got {raw!r}")
    return value


def _int(env: Mapping[str, str], name: str, default: int, minimum: int = 0) -> int:
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw)
    except ValueError as exc:
        raise UserError(f"{name} must be a whole number, got {raw!r}") from exc
    if value < minimum:
        raise UserError(f"{name} must be at least {minimum}, got {value}")
    return value


def _ttl(env: Mapping[str, str], name: str, default: int) -> int | None:
    """Seconds a Tinker checkpoint lives: Tinker takes 1 hour to 10 years; 0 means forever."""
    value = _int(env, name, default)
    if value == 0:
        return None
    if value < 3600:
        raise UserError(f"{name} must be 0 (keep forever) or at least 3600 seconds, got {value}")
    return value


def _seconds(env: Mapping[str, str], name: str) -> float | None:
    """An optional number of seconds (None when unset: the reader's own default applies)."""
    if not env.get(name, "").strip():
        return None
    return _float(env, name, 0.0)


def _log_level(env: Mapping[str, str]) -> str:
    value = env.get("MCP_RL_LOG_LEVEL", "").strip().upper() or "INFO"
    if value not in LOG_LEVELS:
        raise UserError(f"MCP_RL_LOG_LEVEL must be one of {', '.join(LOG_LEVELS)}, got {value!r}")
    return value


def _problem(err: Any) -> str:
    """A pydantic error as `MCP_RL_NAME: message` (the field's variable, where we know it)."""
    field = str(err["loc"][0]) if err.get("loc") else ""
    message = str(err["msg"]).removeprefix("Value error, ")
    return f"{ENV_NAMES.get(field, field)}: {message}" if field else message


# Text that stands in for a key someone did not fill in: Hermes passes an unset `${NAME}` on as
# those literal characters, and config snippets copied as they are carry "...", "<your key>" or
# "YOUR_API_KEY". Taken for a key, such a value sends a first session to a paid service.
_PLACEHOLDER = re.compile(
    r"""^(
        \$\{.*\} | \$\(.*\) | \$[A-Za-z_][A-Za-z0-9_]* | %[A-Za-z_][A-Za-z0-9_]*% | \{\{.*\}\}
      | <.*> | \[.*\] | .*(\.\.\.|\u2026).*
      | (your|my|insert|enter|put|paste)[-_ ].* | .*[-_ ]here
      | x+ | \*+ | (changeme|change[-_ ]me|placeholder|todo|tbd|none|null|undefined|secret|api[-_ ]?key|token|key)
    )$""",
    re.IGNORECASE | re.VERBOSE,
)


def is_placeholder(value: str) -> bool:
    """True when `value` only looks like a key: blank, or a template someone did not fill in."""
    return not value.strip() or bool(_PLACEHOLDER.match(value.strip()))


def placeholder_secrets(env: Mapping[str, str]) -> tuple[str, ...]:
    """The secret variables that are set, but to a placeholder rather than a key."""
    return tuple(name for name in SECRET_ENV_VARS if env.get(name, "").strip() and is_placeholder(env[name]))


def _secret(env: Mapping[str, str], name: str) -> SecretStr | None:
    value = env.get(name, "").strip()
    return SecretStr(value) if value and not is_placeholder(value) else None


class Settings(BaseModel):
    """What mcp-rl reads from its environment. Build with `Settings.from_env()`."""

    model_config = ConfigDict(frozen=True)

    home: Path
    env_paths: list[Path] = []
    # Where the interpreters of environment families (verifiers, openenv) are made; None: home/families.
    families_dir: Path | None = None
    # The original rate-limited rl_check_status to once per 30 minutes per run; 0 disables.
    status_min_interval_s: float = 1800.0
    # An MCP task's judge spend, shared by a run's processes (its environment and its held-out
    # evaluations) so judge.max_cost_usd holds over their sum; set by mcp-rl for its children.
    judge_spend_file: Path | None = None
    introspect_timeout_s: float = 120.0
    # How long the warm introspection worker (atroposlib imported once, ~300 MB) waits for the
    # next select before it exits; 0: no worker, a fresh child per select (seconds slower).
    introspect_worker_idle_s: float = Field(600.0, ge=0)
    # Every tool call answers within this many seconds (Claude Desktop cancels a call at about
    # 60 s); longer work goes on in the background and the answer names the tool that collects it.
    tool_time_budget_s: float = Field(45.0, gt=0, le=600)
    # Seconds between the server's looks at the registry and metrics files (change notifications),
    # bounded: MCP_RL_WATCH_INTERVAL=0 would poll without pause and spin an idle server.
    watch_interval_s: float = Field(1.0, ge=MIN_WATCH_INTERVAL_S, le=MAX_WATCH_INTERVAL_S)
    # A local Hugging Face model folder to use instead of the embedded default model.
    model_path: Path | None = None

    tinker_api_key: SecretStr | None = None
    tinker_base_url: str | None = None
    wandb_api_key: SecretStr | None = None
    wandb_entity: str | None = None
    wandb_project: str | None = None
    wandb_mode: str | None = None
    openrouter_api_key: SecretStr | None = None
    openrouter_base_url: str = "https://openrouter.ai/api/v1"
    # The user's Hugging Face token for pushing exports (else their `hf auth login`); HF_ENDPOINT
    # is read by huggingface_hub itself.
    hf_token: SecretStr | None = None
    # The older spelling huggingface_hub also reads (HUGGING_FACE_HUB_TOKEN): known so it is scrubbed.
    hf_token_alias: SecretStr | None = None
    # The HTTP transport (mcp_rl.http_auth): the bearer token and extra Host/Origin names.
    http_token: SecretStr | None = None
    # Secret variables that held a placeholder (`${TINKER_API_KEY}`, "...") and count as unset.
    placeholder_env_vars: tuple[str, ...] = ()
    http_allowed_hosts: list[str] = []
    # The user's explicit word on service URLs an agent may put in a config (mcp_rl.urls):
    # self-hosted Tinker-compatible servers that may receive TINKER_API_KEY (tinker_base_url), and
    # Ray dashboards in private ranges (ray_address). Entries: host, host:port or http://host:port.
    tinker_hosts: list[str] = []
    ray_hosts: list[str] = []
    # Sampling requests a remote backend (Tinker) serves at once (a local model batches instead).
    remote_sampling_concurrency: int = 32
    # The local sampler batches requests that arrive together: after a first request it waits
    # this long for others (an environment's workers ask within milliseconds of each other; on a
    # loaded 2-core machine 0.02 s caught 5 of 8 on average, 0.05 s all 8), and a batch holds at
    # most this many sequences.
    local_batch_window_s: float = Field(0.05, ge=0, le=1)
    local_batch_max_sequences: int = Field(64, ge=1)
    # How long the trainer waits for Tinker to create its model (it may queue) before failing.
    tinker_create_timeout_s: float = 600.0
    # Lifetime of intermediate Tinker checkpoints (seconds, >= 3600); None keeps them forever.
    # The final checkpoint of a run is always kept.
    tinker_checkpoint_ttl_s: int | None = 7 * 24 * 3600
    # A local tokenizer folder for a Tinker model, instead of fetching it from the Hugging Face hub.
    tokenizer_path: Path | None = None
    # Deadline of a W&B look-up in rl_get_results; None: `wandb_deadline_s` picks one in the budget.
    wandb_timeout_s: float | None = Field(None, gt=0)
    # Log level of the trainer and model-server processes.
    log_level: str = "INFO"
    # torch threads of the local trainer; 0: half the cores.
    torch_threads: int = Field(0, ge=0)
    # Supervisor deadlines (mcp_rl.supervisor.Policy); None keeps the policy's own default.
    api_ready_s: float | None = Field(None, gt=0)
    trainer_ready_s: float | None = Field(None, gt=0)
    env_ready_s: float | None = Field(None, gt=0)
    heartbeat_timeout_s: float | None = Field(None, gt=0)
    api_unresponsive_s: float | None = Field(None, gt=0)
    stop_grace_s: float | None = Field(None, gt=0)
    trainer_stop_grace_s: float | None = Field(None, gt=0)
    # The user's own pricing file (same form as configs/pricing.yaml), read over the packaged one.
    pricing_file: Path | None = None
    # A paid start (Tinker run, OpenRouter smoke test) whose estimate is above this many USD and
    # has no cost cap is refused until a cap is set (or the person says yes when asked).
    confirm_above_usd: float = Field(5.0, ge=0, allow_inf_nan=False)

    @model_validator(mode="after")
    def _teach_scrubber(self) -> Settings:
        # Every process that holds a key knows it, so the scrubber removes it from what leaves.
        for name, value in self.secret_values().items():
            redact.learn(name, value)
        return self

    @model_validator(mode="after")
    def _wandb_within_budget(self) -> Settings:
        if self.wandb_timeout_s is not None and self.wandb_timeout_s >= self.tool_time_budget_s:
            raise ValueError(
                f"MCP_RL_WANDB_TIMEOUT ({self.wandb_timeout_s:g} s) must be below MCP_RL_TOOL_TIME_BUDGET "
                f"({self.tool_time_budget_s:g} s): the W&B look-up happens inside one tool call"
            )
        return self

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env
        home = home_dir(env)
        model = env.get("MCP_RL_MODEL")
        try:
            return cls._from_env(env, home, model)
        except ValidationError as exc:
            # One line per bad value, named as the user wrote it (not a pydantic traceback).
            raise UserError("; ".join(_problem(err) for err in exc.errors())) from None

    @classmethod
    def _from_env(cls, env: Mapping[str, str], home: Path, model: str | None) -> Settings:
        return cls(
            home=home.resolve(),
            env_paths=_paths(env.get("MCP_RL_ENV_PATHS")),
            families_dir=Path(fd).expanduser().resolve() if (fd := env.get("MCP_RL_FAMILIES_DIR")) else None,
            status_min_interval_s=_float(env, "MCP_RL_STATUS_MIN_INTERVAL", 1800.0),
            judge_spend_file=Path(js) if (js := env.get("MCP_RL_JUDGE_SPEND_FILE")) else None,
            introspect_timeout_s=_float(env, "MCP_RL_INTROSPECT_TIMEOUT", 120.0),
            introspect_worker_idle_s=_float(env, "MCP_RL_INTROSPECT_WORKER_IDLE", 600.0),
            tool_time_budget_s=_float(env, "MCP_RL_TOOL_TIME_BUDGET", 45.0),
            watch_interval_s=min(
                max(_float(env, "MCP_RL_WATCH_INTERVAL", 1.0), MIN_WATCH_INTERVAL_S), MAX_WATCH_INTERVAL_S
            ),
            model_path=Path(model).expanduser().resolve() if model else None,
            tinker_api_key=_secret(env, "TINKER_API_KEY"),
            tinker_base_url=env.get("TINKER_BASE_URL") or None,
            wandb_api_key=_secret(env, "WANDB_API_KEY"),
            wandb_entity=env.get("WANDB_ENTITY") or None,
            wandb_project=env.get("WANDB_PROJECT") or None,
            wandb_mode=env.get("WANDB_MODE") or None,
            openrouter_api_key=_secret(env, "OPENROUTER_API_KEY"),
            openrouter_base_url=env.get("OPENROUTER_BASE_URL") or "https://openrouter.ai/api/v1",
            http_token=_secret(env, "MCP_RL_TOKEN"),
            hf_token=_secret(env, "HF_TOKEN"),
            hf_token_alias=_secret(env, "HUGGING_FACE_HUB_TOKEN"),
            placeholder_env_vars=placeholder_secrets(env),
            http_allowed_hosts=_words(env.get("MCP_RL_ALLOWED_HOSTS")),
            tinker_hosts=_hosts(env, "MCP_RL_TINKER_HOSTS"),
            ray_hosts=_hosts(env, "MCP_RL_RAY_HOSTS"),
            remote_sampling_concurrency=_int(env, "MCP_RL_REMOTE_SAMPLING_CONCURRENCY", 32, minimum=1),
            local_batch_window_s=_float(env, "MCP_RL_LOCAL_BATCH_WINDOW", 0.05),
            local_batch_max_sequences=_int(env, "MCP_RL_LOCAL_BATCH_MAX_SEQUENCES", 64, minimum=1),
            tinker_create_timeout_s=_float(env, "MCP_RL_TINKER_CREATE_TIMEOUT", 600.0),
            tinker_checkpoint_ttl_s=_ttl(env, "MCP_RL_TINKER_CHECKPOINT_TTL", 7 * 24 * 3600),
            tokenizer_path=Path(tok).expanduser().resolve() if (tok := env.get("MCP_RL_TOKENIZER_PATH")) else None,
            wandb_timeout_s=_seconds(env, "MCP_RL_WANDB_TIMEOUT"),
            log_level=_log_level(env),
            torch_threads=_int(env, "MCP_RL_TORCH_THREADS", 0),
            api_ready_s=_seconds(env, "MCP_RL_API_READY_TIMEOUT"),
            trainer_ready_s=_seconds(env, "MCP_RL_TRAINER_READY_TIMEOUT"),
            env_ready_s=_seconds(env, "MCP_RL_ENV_READY_TIMEOUT"),
            heartbeat_timeout_s=_seconds(env, "MCP_RL_HEARTBEAT_TIMEOUT"),
            api_unresponsive_s=_seconds(env, "MCP_RL_API_UNRESPONSIVE_TIMEOUT"),
            stop_grace_s=_seconds(env, "MCP_RL_STOP_GRACE"),
            trainer_stop_grace_s=_seconds(env, "MCP_RL_TRAINER_STOP_GRACE"),
            pricing_file=Path(pf).expanduser().resolve() if (pf := env.get("MCP_RL_PRICING_FILE")) else None,
            confirm_above_usd=_float(env, "MCP_RL_CONFIRM_ABOVE_USD", 5.0),
        )

    # --- the state directory -------------------------------------------------------------
    @property
    def state_db(self) -> Path:
        return self.home / "state.db"

    @property
    def session_file(self) -> Path:
        return self.home / "session.json"

    @property
    def runs_dir(self) -> Path:
        return self.home / "runs"

    @property
    def tests_dir(self) -> Path:
        return self.home / "tests"

    @property
    def models_dir(self) -> Path:
        return self.home / "models"

    @property
    def cache_dir(self) -> Path:
        return cache_dir(self.home)

    @property
    def evaluations_dir(self) -> Path:
        return self.home / "evaluations"

    @property
    def exports_dir(self) -> Path:
        return self.home / "exports"

    def ensure_home(self) -> None:
        for path in (self.home, self.runs_dir, self.tests_dir, self.models_dir, self.cache_dir):
            path.mkdir(parents=True, exist_ok=True)

    # --- derived facts -------------------------------------------------------------------
    @property
    def wandb_enabled(self) -> bool:
        """W&B logs online only with a key; offline mode needs none. Never required."""
        if self.wandb_mode in ("disabled",):
            return False
        return self.wandb_api_key is not None or self.wandb_mode == "offline"

    @property
    def wandb_deadline_s(self) -> float:
        """How long a W&B look-up may take: MCP_RL_WANDB_TIMEOUT, else 8 s within half the budget."""
        if self.wandb_timeout_s is not None:
            return self.wandb_timeout_s
        return min(DEFAULT_WANDB_TIMEOUT_S, self.tool_time_budget_s / 2)

    def placeholder_notes(self) -> list[str]:
        """One line per secret variable that held a placeholder: which, and what to do."""
        return [
            f"{name} holds a placeholder, not a key, and counts as unset: set it to the real key in the "
            "MCP client's `env` for this server, or leave it out of the config entirely"
            for name in self.placeholder_env_vars
        ]

    @property
    def default_backend(self) -> str:
        return "tinker" if self.tinker_api_key is not None else "local"

    @property
    def allowed_tinker_hosts(self) -> list[AllowedHost]:
        return parse_allowed_hosts(self.tinker_hosts, "MCP_RL_TINKER_HOSTS")

    @property
    def allowed_ray_hosts(self) -> list[AllowedHost]:
        return parse_allowed_hosts(self.ray_hosts, "MCP_RL_RAY_HOSTS")

    @property
    def user_envs_dir(self) -> Path:
        """Where rl_new_environment writes a task when MCP_RL_ENV_PATHS names no folder."""
        return self.home / "envs"

    def environment_dirs(self) -> list[Path]:
        """Folders scanned for environments: the bundled one first, then MCP_RL_ENV_PATHS, then
        $MCP_RL_HOME/envs once it exists (the scaffold's default folder)."""
        extra = [self.user_envs_dir] if self.user_envs_dir.is_dir() and self.user_envs_dir not in self.env_paths else []
        return [bundled_environments_dir(), *self.env_paths, *extra]

    def secret_values(self) -> dict[str, str]:
        """Every secret value this process holds, by the variable it came from (for the scrubber)."""
        held = {
            "TINKER_API_KEY": self.tinker_api_key,
            "WANDB_API_KEY": self.wandb_api_key,
            "OPENROUTER_API_KEY": self.openrouter_api_key,
            "HF_TOKEN": self.hf_token,
            "MCP_RL_TOKEN": self.http_token,
            "HUGGING_FACE_HUB_TOKEN": self.hf_token_alias,
        }
        return {name: value.get_secret_value() for name, value in held.items() if value is not None}

    def user_code_env(
        self, named: Iterable[str] = (), base: Mapping[str, str] | None = None, **extra: str
    ) -> dict[str, str]:
        """THE environment of every process that runs user code (a task's or environment's own
        code: validation, introspection, smoke-test and evaluation environments, a run's
        environment process, item counts, family builds).

        An allow-list (`USER_CODE_ENV_NAMES`, `USER_CODE_ENV_PREFIXES`), plus the variables the
        task or environment names in its own `env_vars` (`named`), plus `extra` (our own launch
        settings). mcp-rl's keys (Tinker, OpenRouter, W&B, Hugging Face, the HTTP token) reach it
        only when named. `base`: the environment to pick from (default: this process's).
        """
        source = os.environ if base is None else base
        env = {name: value for name, value in source.items() if _user_code_may_see(name)}
        held = self.secret_values()
        for name in named:
            if name in held:
                env[name] = held[name]  # the key as Settings holds it (a placeholder never counts)
            elif name in source and not (name in SECRET_ENV_VARS and is_placeholder(source[name])):
                env[name] = source[name]
        env["MCP_RL_HOME"] = str(self.home)
        env.setdefault("TOKENIZERS_PARALLELISM", "false")
        env["PYTHONUNBUFFERED"] = "1"
        if not self.wandb_enabled:
            env["WANDB_MODE"] = "disabled"
        env.update(extra)
        return env

    def child_env(self, base: Mapping[str, str] | None = None, **extra: str) -> dict[str, str]:
        """Environment for a child process that runs only mcp-rl's own code (the supervisor, the
        trainer, the workers of smoke tests, evaluations and exports): the parent's, our
        settings, and secrets by name only. Never for user code: that is `user_code_env`.

        Secrets travel here and nowhere else (never argv). The user's own hub settings
        (HF_HUB_OFFLINE, HF_TOKEN, ...) pass through unchanged: users' machines reach the Hugging
        Face hub, so offline mode is never forced on them (tests set it themselves).
        """
        env = dict(os.environ if base is None else base)
        for name in SECRET_ENV_VARS:
            if name in env and is_placeholder(env[name]):
                del env[name]  # a placeholder is no key: no child (wandb, tinker) may take it for one
        env["MCP_RL_HOME"] = str(self.home)
        env.setdefault("TOKENIZERS_PARALLELISM", "false")
        env["PYTHONUNBUFFERED"] = "1"
        if not self.wandb_enabled:
            env["WANDB_MODE"] = "disabled"
        for name, secret in (
            ("TINKER_API_KEY", self.tinker_api_key),
            ("WANDB_API_KEY", self.wandb_api_key),
            ("OPENROUTER_API_KEY", self.openrouter_api_key),
            ("HF_TOKEN", self.hf_token),
        ):
            if secret is not None:
                env[name] = secret.get_secret_value()
        env.update(extra)
        return env
