"""What the environment tools do: list, select, read and edit the session's configuration."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from mcp_rl import config
from mcp_rl.environments.discovery import Catalog, EnvironmentInfo, ScanCache, scan
from mcp_rl.environments.introspect import ConfigSpec, read_config_spec
from mcp_rl.errors import UserError
from mcp_rl.settings import Settings


class SelectResult(BaseModel):
    message: str
    environment: str
    class_name: str
    file_path: str
    config_class: str
    config_source: str
    fallback_reason: str | None = None
    configurable_fields: int
    next_step: str


class EnvironmentService:
    """One per server; holds only a parse cache, everything else is on disk."""

    def __init__(self, settings: Settings, scan_cache: ScanCache | None = None) -> None:
        self.settings = settings
        self.store = config.SessionStore(settings)
        self._scan_cache = scan_cache or ScanCache()

    def catalog(self) -> Catalog:
        return scan(self.settings.environment_dirs(), self._scan_cache)

    def get(self, name: str) -> EnvironmentInfo:
        catalog = self.catalog()
        env = catalog.get(name)
        if env is None:
            raise config.unknown_environment(name, catalog.names)
        return env

    def spec(self, env: EnvironmentInfo) -> ConfigSpec:
        return read_config_spec(self.settings, env)

    def select(self, name: str) -> SelectResult:
        env = self.get(name)
        spec = self.spec(env)  # before touching the session: a broken env changes nothing
        config.select_environment(self.store, env)
        note = f" config_init() failed, so BaseEnvConfig defaults are used: {spec.fallback_reason}" if spec.fallback_reason else ""
        return SelectResult(
            message=f"Selected {env.name} ({env.class_name}).{note}",
            environment=env.name,
            class_name=env.class_name,
            file_path=str(env.file_path),
            config_class=spec.config_class,
            config_source=spec.source,
            fallback_reason=spec.fallback_reason,
            configurable_fields=len(spec.fields),
            next_step="Call rl_get_current_config to see fields, rl_edit_config to change them, then rl_test_inference.",
        )

    def selected(self) -> tuple[config.Session, ConfigSpec]:
        """The session and the selected environment's spec (re-read if its file changed)."""
        session = self.store.read()
        if session.environment is None:
            raise UserError("No environment selected. Call rl_list_environments, then rl_select_environment(name).")
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
        _, spec = self.selected()
        return config.edit_config(self.settings, self.store, spec, field, value)

    def locked(self) -> dict[str, Any]:
        session = self.store.read()
        options, _ = config.resolve_run_options(self.settings, session.run_options)
        backend = config.effective_backend(self.settings, options.backend)
        fields = config.locked_fields(backend)
        return {"backend": backend, "env": fields.env, "openai": fields.openai, "note": "'derived' values are set when a run starts."}
