"""Tools and resources for discovering, selecting and configuring environments."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import anyio
from mcp.server import MCPServer
from mcp.types import ToolAnnotations
from pydantic import BaseModel, Field

from mcp_rl.config import CurrentConfig, EditResult
from mcp_rl.environments.discovery import DuplicateName, ParseProblem
from mcp_rl.environments.gem_catalog import GemCatalog, GemGroup
from mcp_rl.environments.service import EnvironmentService, SelectResult
from mcp_rl.server.app import AppState
from mcp_rl.server.errors import resource_errors, tool_errors

READ_ONLY = ToolAnnotations(read_only_hint=True, open_world_hint=False)
IDEMPOTENT_EDIT = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False)


class EnvironmentEntry(BaseModel):
    name: str
    class_name: str
    file_path: str
    description: str


class GemEnvironmentEntry(BaseModel):
    id: str = Field(description="Pass it to rl_select_environment.")
    group: str
    description: str
    needs: str | None = Field(None, description="What it downloads on first use (None: generated locally).")


class GemSummary(BaseModel):
    """GEM (gem-llm) environments, grouped by GEM's own id prefix."""

    installed: bool
    version: str | None = None
    total: int = 0
    groups: list[GemGroup] = []
    error: str | None = None


class EnvironmentList(BaseModel):
    environments: list[EnvironmentEntry]
    count: int
    problems: list[ParseProblem] = Field(description="Files that could not be parsed (skipped, not fatal).")
    duplicates: list[DuplicateName] = Field(description="Names defined more than once; the first one found is used.")
    searched: list[str]
    tips: list[str]
    gem: GemSummary | None = Field(None, description="GEM environments by group (ids listed with a filter).")
    gem_environments: list[GemEnvironmentEntry] = Field(
        default_factory=list, description="GEM ids matching `filter` (only when a filter is given), one page."
    )
    gem_matches: int = Field(0, description="GEM ids matching `filter` in all pages.")
    next_offset: int | None = Field(None, description="offset of the next page of gem_environments, if any.")


def _gem_summary(gem: GemCatalog) -> GemSummary:
    return GemSummary(
        installed=gem.installed, version=gem.version, total=len(gem.entries), groups=gem.groups(), error=gem.error
    )


def _matches(text: str | None, *fields: str) -> bool:
    return text is None or text.strip().lower() in "\n".join(fields).lower()


def register(mcp: MCPServer, state: AppState) -> None:
    service = EnvironmentService(state.settings)
    state.caches["environments"] = service

    @mcp.tool(annotations=READ_ONLY)
    @tool_errors
    async def rl_list_environments(
        filter: Annotated[
            str | None,
            Field(
                description="Case-insensitive text to look for in names, GEM ids, groups and descriptions "
                "(e.g. 'game', 'wordle', 'rg:'); 'gem' lists every GEM environment. Without it, GEM "
                "environments are only summarised by group."
            ),
        ] = None,
        offset: Annotated[int, Field(ge=0, description="First GEM match to return (paging).")] = 0,
        limit: Annotated[int, Field(ge=1, le=200, description="GEM matches per page.")] = 50,
    ) -> EnvironmentList:
        """List the RL environments available for training.

        Scans the bundled environments and every folder in MCP_RL_ENV_PATHS for Atropos BaseEnv
        classes (source only, nothing is imported). Files that fail to parse are listed under
        `problems`; duplicate names under `duplicates`. GEM environments (gem-llm: games such as
        game:GuessTheNumber-v0-easy, Wordle, Sudoku; reasoning_gym tasks; math/code/QA datasets)
        are summarised under `gem`; pass `filter` to list matching GEM ids (paged), or read
        rl://environments/gem for all. Next: rl_select_environment(name or GEM id).
        """
        catalog = await anyio.to_thread.run_sync(service.catalog)
        gem = await anyio.to_thread.run_sync(service.gem)
        gem_page: list[GemEnvironmentEntry] = []
        matches = 0
        next_offset = None
        if filter is not None:
            found = gem.search(filter)
            matches = len(found)
            gem_page = [
                GemEnvironmentEntry(id=e.id, group=e.group, description=e.description, needs=e.needs)
                for e in found[offset : offset + limit]
            ]
            next_offset = offset + limit if offset + limit < matches else None
        environments = [
            e
            for e in catalog.environments
            if filter is None or filter.strip().lower() in ("gem", "*") or _matches(filter, e.name, e.description)
        ]
        return EnvironmentList(
            environments=[
                EnvironmentEntry(
                    name=e.name, class_name=e.class_name, file_path=str(e.file_path), description=e.description
                )
                for e in environments
            ],
            count=len(environments),
            problems=catalog.problems,
            duplicates=catalog.duplicates,
            searched=[str(p) for p in catalog.searched],
            tips=[
                "Select one with rl_select_environment(name); its config fields are then loaded.",
                "Smoke-test it with rl_test_inference before training.",
                "Add folders of environments with the MCP_RL_ENV_PATHS environment variable.",
                "GEM environments: rl_list_environments(filter='game') lists the game ids; select one by id, "
                "e.g. rl_select_environment('game:GuessTheNumber-v0-easy').",
            ],
            gem=_gem_summary(gem),
            gem_environments=gem_page,
            gem_matches=matches,
            next_offset=next_offset,
        )

    @mcp.tool(annotations=IDEMPOTENT_EDIT)
    @tool_errors
    async def rl_select_environment(
        name: Annotated[str, Field(description="Environment name from rl_list_environments, e.g. 'arithmetic'.")],
    ) -> SelectResult:
        """Select the environment to configure, test and train.

        Loads the environment's config fields (imports it in a separate process; the first time can
        take several seconds, later selects are instant until the file changes). Selecting resets
        environment field edits to the environment's defaults; run options are kept.
        """
        return await anyio.to_thread.run_sync(service.select, name)

    @mcp.tool(annotations=READ_ONLY)
    @tool_errors
    async def rl_get_current_config() -> CurrentConfig:
        """Show the selected environment's configuration.

        configurable_fields (type, default, description, current_value) can be changed with
        rl_edit_config; locked_fields are set by the infrastructure; run_options (backend, base
        model, total_steps, batch_size, LoRA rank, learning rate, wandb_project, ...) are editable
        with rl_edit_config too.
        """
        return await anyio.to_thread.run_sync(service.current)

    @mcp.tool(annotations=IDEMPOTENT_EDIT)
    @tool_errors
    async def rl_edit_config(
        field: Annotated[str, Field(description="A configurable field or run option name from rl_get_current_config.")],
        value: Annotated[Any, Field(description="New value, of the field's type (numbers and booleans as JSON).")],
    ) -> EditResult:
        """Change one field of the selected environment's config, or one run option.

        The value is checked against the environment's own config class (type and range); locked
        fields, unknown fields and invalid values are refused with the reason, and nothing changes.
        """
        return await anyio.to_thread.run_sync(service.edit, field, value)

    @mcp.resource(
        "rl://environments",
        name="environments",
        title="Environments",
        mime_type="application/json",
        description="Every environment mcp-rl found (bundled ones and MCP_RL_ENV_PATHS), with the files it could not parse.",
    )
    def environments_resource() -> str:
        return service.catalog().model_dump_json(indent=2)

    @mcp.resource(
        "rl://environments/gem",
        name="gem_environments",
        title="GEM environments",
        mime_type="application/json",
        description="Every GEM environment id (gem-llm) with its group, description and kwargs.",
    )
    def gem_environments_resource() -> str:
        gem = service.gem()
        data = _gem_summary(gem).model_dump(mode="json")
        data["select_with"] = "rl_select_environment('<id>'): the bundled 'gem' environment with env_id preset."
        data["environments"] = [e.model_dump(mode="json") for e in gem.entries]
        return json.dumps(data, indent=2)

    @mcp.resource(
        "rl://environments/{name}",
        name="environment",
        title="Environment details",
        mime_type="application/json",
        description="One environment (a name or GEM id from rl_list_environments): its metadata and Python source.",
    )
    @resource_errors
    def environment_resource(name: str) -> str:
        env = service.get(name)
        data = env.model_dump(mode="json")
        data["source"] = Path(env.file_path).read_text(encoding="utf-8", errors="replace")
        return json.dumps(data, indent=2)

    @mcp.resource(
        "rl://config/current",
        name="current_config",
        title="Current configuration",
        mime_type="application/json",
        description="The selected environment's config fields and run options, with their current values.",
    )
    def current_config_resource() -> str:
        session = service.store.read()
        if session.environment is None:
            return json.dumps({"environment": None, "message": "No environment selected; call rl_select_environment."})
        return service.current().model_dump_json(indent=2)

    @mcp.resource(
        "rl://config/locked",
        name="locked_config",
        title="Fields set by mcp-rl",
        mime_type="application/json",
        description="Config fields mcp-rl sets itself for the current backend (rl_edit_config refuses them).",
    )
    def locked_config_resource() -> str:
        return json.dumps(service.locked(), indent=2)
