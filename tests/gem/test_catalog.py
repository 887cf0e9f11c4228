"""GEM ids: listing (child process, cached by version), selection as virtual entries, edits."""

from __future__ import annotations

import json

import pytest
from mcp import Client

from mcp_rl import config
from mcp_rl.config.environment_service import EnvironmentService
from mcp_rl.environments import gem_catalog
from mcp_rl.errors import NotFound
from mcp_rl.server import build_server
from mcp_rl.settings import Settings
from tests.conftest import make_env

EASY = "game:GuessTheNumber-v0-easy"


@pytest.fixture(scope="module")
def gem_settings(tmp_path_factory) -> Settings:
    # One state dir for the module: the GEM listing and the gem env's introspection are read once.
    home = tmp_path_factory.mktemp("gem-home")
    return Settings.from_env(make_env(home))


def test_catalog_lists_gem_ids_by_group_and_caches(gem_settings, monkeypatch):
    catalog = gem_catalog.load_catalog(gem_settings)
    assert catalog.installed and catalog.error is None
    assert catalog.version == gem_catalog.installed_version()
    easy = catalog.get(EASY)
    assert easy is not None and easy.group == "game"
    assert "GuessTheNumberEnv" in easy.description and "max_number=10" in easy.description
    assert easy.needs is None  # generated locally
    groups = {g.prefix: g for g in catalog.groups()}
    assert groups["game"].count >= 30 and len(groups["game"].examples) == 3
    assert sum(g.count for g in groups.values()) == len(catalog.entries) > 150
    assert "Hugging Face dataset" in (catalog.get("math:GSM8K").needs or "")
    # The second read is the cache: no child process any more.
    monkeypatch.setattr(gem_catalog, "_run_child", lambda s: pytest.fail("child started although cached"))
    assert gem_catalog.load_catalog(gem_settings).ids == catalog.ids


def test_closest_matches_and_search(gem_settings):
    catalog = gem_catalog.load_catalog(gem_settings)
    assert EASY in catalog.closest("game:GuessTheNumber-v0-eazy")
    assert any("Wordle" in i for i in catalog.closest("wordle"))
    assert {e.group for e in catalog.search("game:")} == {"game"}
    assert len(catalog.search("gem")) == len(catalog.entries)


def test_not_installed_is_reported_not_raised(gem_settings, monkeypatch):
    monkeypatch.setattr(gem_catalog, "installed_version", lambda: None)
    catalog = gem_catalog.load_catalog(gem_settings)
    assert not catalog.installed and "pip install" in (catalog.error or "")


def test_select_gem_id_presets_env_id_and_edits_are_checked(gem_settings):
    service = EnvironmentService(gem_settings)
    result = service.select(EASY)
    assert result.class_name == "GemEnv" and result.preset == {"env_id": EASY}
    current = service.current()
    assert current.environment == EASY
    fields = {f.name: f for f in current.configurable_fields}
    assert fields["env_id"].current_value == EASY
    for name in ("num_envs", "wrappers", "template", "gamma", "batch_normalize", "max_turns", "max_tokens_per_turn"):
        assert name in fields, name
    # Locked fields stay locked for GEM too.
    assert "max_token_length" in {f.name for f in current.locked_fields}
    with pytest.raises(Exception, match="locked"):
        service.edit("max_token_length", 99)
    # Typed edits: gamma is a probability, template a known one.
    with pytest.raises(Exception, match="Invalid value"):
        service.edit("gamma", 1.5)
    with pytest.raises(Exception, match="Invalid value"):
        service.edit("template", "qwen4")
    assert service.edit("gamma", "0.5").value == 0.5
    # env_id must be a GEM id GEM knows; the closest are named.
    with pytest.raises(NotFound, match="Closest matches: game:Wordle-v0-easy"):
        service.edit("env_id", "game:Wordle-v0-eazy")
    service.edit("env_id", "game:Wordle-v0-easy")
    assert service.current().environment == "game:Wordle-v0-easy"
    # The run renders env_id and the typed fields into run.yaml's env section.
    session, spec = service.selected()
    run = config.build_run_config(gem_settings, session, spec, "gemrun")
    assert run.env["env_id"] == "game:Wordle-v0-easy" and run.env["gamma"] == 0.5
    assert run.environment.class_name == "GemEnv" and run.environment.file_path.name == "gem_env.py"


def test_unknown_gem_id_names_the_closest(gem_settings):
    service = EnvironmentService(gem_settings)
    with pytest.raises(NotFound) as info:
        service.select("game:GuessTheNumbr-v0-easy")
    assert EASY in str(info.value) and "rl://environments/gem" in str(info.value)


@pytest.mark.anyio
async def test_tools_list_filter_pages_and_resource(gem_settings):
    async with Client(build_server(gem_settings)) as client:
        plain = (await client.call_tool("rl_list_environments", {})).structured_content
        assert "gem" in [e["name"] for e in plain["environments"]]
        assert plain["count"] == len(plain["environments"]) and plain["gem_environments"] == []
        assert {g["prefix"] for g in plain["gem"]["groups"]} >= {"game", "rg", "math"}
        page = (await client.call_tool("rl_list_environments", {"filter": "game:", "limit": 10})).structured_content
        assert len(page["gem_environments"]) == 10 and page["next_offset"] == 10
        assert page["gem_matches"] >= 30 and page["environments"] == []
        rest = (
            await client.call_tool("rl_list_environments", {"filter": "game:", "offset": 10, "limit": 200})
        ).structured_content
        ids = [e["id"] for e in page["gem_environments"] + rest["gem_environments"]]
        assert len(ids) == len(set(ids)) == page["gem_matches"] and rest["next_offset"] is None
        resource = json.loads((await client.read_resource("rl://environments/gem")).contents[0].text)
        assert resource["total"] == len(resource["environments"]) and EASY in {
            e["id"] for e in resource["environments"]
        }
        selected = await client.call_tool("rl_select_environment", {"name": EASY})
        assert not selected.is_error and selected.structured_content["preset"] == {"env_id": EASY}
        bad = await client.call_tool("rl_select_environment", {"name": "game:Minesweeper-v0-eazy"})
        assert bad.is_error and "game:Minesweeper-v0-easy" in bad.content[0].text


def test_gem_on_tinker_trains_the_recipes_base_model(gem_settings):
    """GEM's Tinker recipe trains Qwen/Qwen3-8B-Base with the qwen3_game prompt; other
    environments keep the tinker default, and a base_model the run sets wins."""
    from mcp_rl.runconfig import EnvironmentRef

    gem_env = EnvironmentRef(
        name=EASY,
        class_name="GemEnv",
        file_path=gem_catalog.gem_env_file(),
        project_root=gem_catalog.gem_env_file().parent,
    )
    other = gem_env.model_copy(
        update={
            "name": "arithmetic",
            "class_name": "ArithmeticEnv",
            "file_path": gem_env.file_path.with_name("arithmetic.py"),
        }
    )
    tinker = {"backend": "tinker"}
    assert config.resolve_run_options(gem_settings, tinker, gem_env)[0].base_model == "Qwen/Qwen3-8B-Base"
    assert config.resolve_run_options(gem_settings, tinker, other)[0].base_model == "Qwen/Qwen3-8B"
    chosen = {**tinker, "base_model": "Qwen/Qwen3-8B"}
    assert config.resolve_run_options(gem_settings, chosen, gem_env)[0].base_model == "Qwen/Qwen3-8B"
    # The locally run GEM keeps the embedded model.
    assert config.resolve_run_options(gem_settings, {"backend": "local"}, gem_env)[0].base_model == "default"
