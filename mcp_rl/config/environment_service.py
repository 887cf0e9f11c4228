"""What the environment tools do: list, select, read and edit the session's configuration."""

from __future__ import annotations

from typing import Any

import anyio
from pydantic import BaseModel, Field

from mcp_rl import config
from mcp_rl.config.fit import fit_after_selection
from mcp_rl.environments import families, gem_catalog, openenv_catalog, verifiers_catalog
from mcp_rl.environments.dependencies import ImportChecker
from mcp_rl.environments.discovery import Catalog, EnvironmentInfo, ScanCache, scan
from mcp_rl.environments.gem_catalog import GemCatalog
from mcp_rl.environments.introspect import ConfigSpec, read_config_spec
from mcp_rl.environments.introspect_worker import IntrospectionWorker
from mcp_rl.environments.rg_spec import describe, parse_spec
from mcp_rl.errors import NotSelected, UserError
from mcp_rl.runconfig import EnvironmentRef
from mcp_rl.settings import Settings, bundled_environments_dir

# reasoning-gym ids: `rg:<dataset>` or a mixture `rg:a=0.7,b=0.3` (the bundled environment's spec).
RG_PREFIX = "rg:"
RG_ENV_FILE = "reasoning_gym_env.py"


class SelectResult(BaseModel):
    message: str
    environment: str
    class_name: str
    file_path: str
    config_class: str
    config_source: str
    fallback_reason: str | None = None
    configurable_fields: int
    preset: dict[str, Any] | None = None
    adjusted: list[str] = Field(
        default_factory=list,
        description="Run options carried over from the last selection that no longer fitted this environment, "
        "each adjusted or reset (e.g. batch_size raised to a multiple of its group_size).",
    )
    next_step: str


class EnvironmentService:
    """One per server; holds a parse cache and the introspection worker, the rest is on disk."""

    def __init__(self, settings: Settings, scan_cache: ScanCache | None = None) -> None:
        self.settings = settings
        self.store = config.SessionStore(settings)
        self._scan_cache = scan_cache or ScanCache()
        self._gem: GemCatalog | None = None
        # None when MCP_RL_INTROSPECT_WORKER_IDLE is 0: a one-shot child per cold select.
        self.worker = IntrospectionWorker(settings) if settings.introspect_worker_idle_s > 0 else None

    def catalog(self) -> Catalog:
        # An agent lists before it selects: warm the worker now (atroposlib's ~3 s import) so
        # the select only pays for the environment's own imports.
        if self.worker is not None:
            self.worker.start()
        catalog = scan(self.settings.environment_dirs(), self._scan_cache)
        # OpenEnv folders (openenv.yaml) and verifiers tasksets on MCP_RL_ENV_PATHS: virtual
        # entries of the bundled environment of their family.
        for module in (openenv_catalog, verifiers_catalog):
            bundled = (self.settings.environment_dirs()[0] / module.ENV_FILE).resolve()
            base = next((e for e in catalog.environments if e.file_path.resolve() == bundled), None)
            if base is not None and self.settings.env_paths:
                taken = set(catalog.names)
                extra = [e for e in module.entries(base, self.settings.env_paths) if e.select_name not in taken]
                catalog = catalog.model_copy(update={"environments": [*catalog.environments, *extra]})
        return catalog

    def missing_modules(self, catalog: Catalog) -> dict[str, list[str]]:
        """Per select name: top-level imports not installed (static: nothing is imported)."""
        checker = ImportChecker()
        return {env.select_name: checker.missing(env) for env in catalog.environments}

    def close(self) -> None:
        """Stop the introspection worker (the server is shutting down)."""
        if self.worker is not None:
            self.worker.close()

    async def close_on_exit(self) -> None:
        """A server background task: runs until the server stops, then stops the worker."""
        try:
            await anyio.sleep_forever()
        finally:
            with anyio.CancelScope(shield=True):  # we get here by cancellation: shield the stop
                await anyio.to_thread.run_sync(self.close)

    def gem(self) -> GemCatalog:
        """GEM's registered environments (read once per server; cached on disk per version)."""
        if self._gem is None or self._gem.version != gem_catalog.installed_version():
            self._gem = gem_catalog.load_catalog(self.settings)
        return self._gem

    def get(self, name: str) -> EnvironmentInfo:
        catalog = self.catalog()
        env = catalog.get(name)
        if env is not None:
            return env
        if gem_catalog.looks_like_gem_id(name):
            return self._gem_environment(name, catalog)
        for problem in catalog.problems:
            # The file the agent means failed to parse: its problem, not "unknown environment".
            if problem.file_path.stem.lower() == name.lower().replace("-", "_"):
                raise UserError(
                    f"{name!r} is not selectable: its file {problem.file_path} could not be parsed: {problem.error}. "
                    "Fix the file (rl_list_environments lists it under `problems`), then select it again."
                )
        raise config.unknown_environment(name, catalog.names)

    def _gem_environment(self, gem_id: str, catalog: Catalog) -> EnvironmentInfo:
        """A GEM id as a virtual entry: the bundled gem environment with `env_id` preset."""
        if gem_id.startswith(RG_PREFIX):
            return self._reasoning_gym(gem_id, catalog)
        gem = self.gem()
        entry = gem.get(gem_id)
        if entry is None:
            raise gem_catalog.unknown_gem_id(gem_id, gem)
        bundled = gem_catalog.gem_env_file().resolve()
        base = next((e for e in catalog.environments if e.file_path == bundled), None)
        if base is None:
            raise UserError(f"The bundled GEM environment {bundled} is missing; reinstall mcp-rl.")
        needs = f" Needs {entry.needs}." if entry.needs else ""
        return base.model_copy(
            update={
                "name": gem_id,
                "select_name": gem_id,
                "qualified_name": None,
                "description": f"GEM {entry.description}.{needs}",
                "preset": {"env_id": gem_id},
            }
        )

    def _reasoning_gym(self, spec: str, catalog: Catalog) -> EnvironmentInfo:
        """`rg:<dataset>` or a mixture `rg:a=0.7,b=0.3`: the bundled reasoning-gym environment
        with `datasets` preset (every dataset checked against reasoning-gym's registry)."""
        try:
            weights = parse_spec(spec)
        except ValueError as exc:
            raise UserError(f"{spec!r}: {exc}.") from None
        listing = self.gem()
        for name in weights:
            if listing.get(f"{RG_PREFIX}{name}") is None:
                raise gem_catalog.unknown_gem_id(f"{RG_PREFIX}{name}", listing)
        bundled = (bundled_environments_dir() / RG_ENV_FILE).resolve()
        base = next((e for e in catalog.environments if e.file_path == bundled), None)
        if base is None:
            raise UserError(f"The bundled reasoning-gym environment {bundled} is missing; reinstall mcp-rl.")
        datasets = ",".join(f"{n}={w:g}" for n, w in weights.items()) if len(weights) > 1 else next(iter(weights))
        name = f"{RG_PREFIX}{datasets}"
        slow = [n for n in weights if "Slow to generate" in (listing.get(f"{RG_PREFIX}{n}") or base).description]
        note = f" Slow to generate: {', '.join(slow)}." if slow else ""
        return base.model_copy(
            update={
                "name": name,
                "select_name": name,
                "qualified_name": None,
                "description": f"{describe(datasets)} (held out: seeds from 1e9, never trained on).{note}",
                "preset": {"datasets": datasets},
            }
        )

    def is_gem(self, env: EnvironmentInfo | EnvironmentRef) -> bool:
        return env.file_path.resolve() == gem_catalog.gem_env_file().resolve()

    def spec(self, env: EnvironmentInfo, timeout_s: float | None = None) -> ConfigSpec:
        """`timeout_s`: a tighter deadline than MCP_RL_INTROSPECT_TIMEOUT for a cold read."""
        return read_config_spec(self.settings, env, self.worker, timeout_s)

    def select(self, name: str, timeout_s: float | None = None) -> SelectResult:
        env = self.get(name)
        spec = self.spec(env, timeout_s)  # before touching the session: a broken env changes nothing
        if spec.working_dir is not None and spec.working_dir != env.project_root:
            # config_init() found its files only from another folder: runs start there too.
            env = env.model_copy(update={"project_root": spec.working_dir})
        # The session names it as the agent does: a qualified name when the plain one is another's.
        env = env.model_copy(update={"name": env.select_name or env.name})
        previous = self.store.read().environment
        config.select_environment(self.store, env)
        if env.preset:
            preset = dict(env.preset)
            self.store.update(lambda s: s.model_copy(update={"edits": preset}))
        # A selection always leaves a startable config: carried-over run options made to fit.
        adjusted = fit_after_selection(self.settings, self.store, spec, previous)
        note = (
            f" config_init() failed, so {spec.config_class} defaults are used: {spec.fallback_reason}"
            if spec.fallback_reason
            else ""
        )
        if env.preset:
            note += f" Preset: {', '.join(f'{k}={v!r}' for k, v in env.preset.items())}."
        if adjusted:
            note += " Adjusted to fit: " + " ".join(adjusted)
        if (
            env.file_path.name == openenv_catalog.ENV_FILE
            and env.file_path.parent == self.settings.environment_dirs()[0]
        ):
            # Its server runs in the openenv interpreter: start making it now, not at the run's start.
            family = families.start_build(self.settings, families.Family.OPENENV)
            if not family.ready:
                note += (
                    f" The openenv interpreter ({', '.join(family.packages)}) is being made in the background "
                    f"({family.folder}); a run waits for it. `mcp-rl doctor` shows its progress."
                )
        return SelectResult(
            message=f"Selected {env.name} ({env.class_name}).{note}",
            environment=env.name,
            class_name=env.class_name,
            file_path=str(env.file_path),
            config_class=spec.config_class,
            config_source=spec.source,
            fallback_reason=spec.fallback_reason,
            configurable_fields=len(spec.fields),
            preset=env.preset,
            adjusted=adjusted,
            next_step="Call rl_get_current_config to see fields, rl_edit_config to change them, then rl_test_inference.",
        )

    def selected(self) -> tuple[config.Session, ConfigSpec]:
        """The session and the selected environment's spec (re-read if its file changed)."""
        session = self.store.read()
        if session.environment is None:
            # A damaged session.json was kept aside: say so, or the lost selection is a mystery.
            repaired = (" " + " ".join(session.notes)) if session.notes else ""
            raise NotSelected(
                "No environment selected. Call rl_list_environments, then rl_select_environment(name)." + repaired
            )
        ref = session.environment
        env = EnvironmentInfo(
            name=ref.name,
            class_name=ref.class_name,
            file_path=ref.file_path,
            description="",
            source_dir=ref.file_path.parent,
            project_root=ref.project_root,
        )
        if not ref.file_path.is_file():
            raise UserError(
                f"The selected environment's file {ref.file_path} is gone. Call rl_list_environments and select again."
            )
        return session, self.spec(env)

    def current(self) -> config.CurrentConfig:
        session, spec = self.selected()
        return config.current_config(self.settings, session, spec)

    def edit(self, field: str, value: Any) -> config.EditResult:
        session, spec = self.selected()
        gem_id = self._gem_env_id_edit(session, field, value)

        # The session is named after the GEM id it trains, so status and runs say which; renamed
        # in the edit's own write, so the revision answered is the config written.
        def rename(s: config.Session) -> config.Session:
            if gem_id is None or s.environment is None or not self.is_gem(s.environment):
                return s
            return s.model_copy(update={"environment": s.environment.model_copy(update={"name": gem_id})})

        return config.edit_config(self.settings, self.store, spec, field, value, worker=self.worker, then=rename)

    def _gem_env_id_edit(self, session: config.Session, field: str, value: Any) -> str | None:
        """For the GEM environment's `env_id`: the id if GEM knows it, else an error naming the
        closest ones (checked here because the config class only knows it is a string)."""
        if field != "env_id" or session.environment is None or not self.is_gem(session.environment):
            return None
        if not isinstance(value, str):
            return None  # the type check of edit_config reports it
        gem = self.gem()
        if gem.get(value) is None:
            raise gem_catalog.unknown_gem_id(value, gem)
        return value

    def locked(self) -> dict[str, Any]:
        session = self.store.read()
        options, _ = config.resolve_run_options(self.settings, session.run_options)
        backend = config.effective_backend(self.settings, options.backend)
        fields = config.locked_fields(backend)
        return {
            "backend": backend,
            # Those a run option sets are editable (rl_edit_config), so not listed as locked.
            "env": {k: v for k, v in fields.env.items() if k not in config.RUN_OPTION_NAMES},
            "openai": fields.openai,
            "note": "'derived' values are set when a run starts. Run options (total_steps, batch_size, ...) are "
            "edited with rl_edit_config.",
        }
