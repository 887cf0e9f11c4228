"""The environment tools through a real MCP client: in memory (both protocol eras) and over stdio."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from mcp import Client

from mcp_rl.server import build_server
from mcp_rl.settings import Settings
from tests.conftest import FIXTURES, REPO, make_env, stdio_params

pytestmark = pytest.mark.anyio
ENV_PATHS = f"{FIXTURES / 'envs' / 'good'}:{FIXTURES / 'envs' / 'broken'}"


@pytest.fixture(params=["auto", "legacy"])
def mode(request) -> str:
    return request.param


def server(home: Path):
    return build_server(Settings.from_env(make_env(home, MCP_RL_ENV_PATHS=ENV_PATHS)))


async def test_tools_have_schemas_and_honest_annotations(home, mode):
    async with Client(server(home), mode=mode) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
    for name in ("rl_list_environments", "rl_select_environment", "rl_get_current_config", "rl_edit_config"):
        assert tools[name].output_schema is not None, name
        assert tools[name].description
    assert tools["rl_list_environments"].annotations.read_only_hint is True
    assert tools["rl_edit_config"].annotations.destructive_hint is False
    assert tools["rl_select_environment"].input_schema["required"] == ["name"]
    assert set(tools["rl_edit_config"].input_schema["required"]) == {"field", "value"}


async def test_list_reports_problems_and_duplicates(home, mode):
    async with Client(server(home), mode=mode) as client:
        result = await client.call_tool("rl_list_environments", {})
    data = result.structured_content
    assert not result.is_error
    assert "counting" in [e["name"] for e in data["environments"]]
    assert data["count"] == len(data["environments"])
    assert [Path(p["file_path"]).name for p in data["problems"]] == ["broken.py"]
    assert data["duplicates"][0]["name"] == "counting"


async def test_select_unknown_names_closest_match(home, mode):
    async with Client(server(home), mode=mode) as client:
        result = await client.call_tool("rl_select_environment", {"name": "countng"})
    assert result.is_error
    text = result.content[0].text
    assert "Closest match: 'counting'" in text and "Available:" in text


async def test_select_edit_and_read_config(home, mode):
    async with Client(server(home), mode=mode) as client:
        selected = await client.call_tool("rl_select_environment", {"name": "counting"})
        assert not selected.is_error, selected.content
        assert selected.structured_content["config_source"] == "config_init"
        ok = await client.call_tool("rl_edit_config", {"field": "max_count", "value": 33})
        assert ok.structured_content["value"] == 33
        for args, needle in [
            ({"field": "max_count", "value": "lots"}, "Invalid value"),
            ({"field": "max_count", "value": 101}, "maximum"),
            ({"field": "max_cont", "value": 3}, "Did you mean max_count"),
            ({"field": "worker_timeout", "value": 5}, "locked"),
        ]:
            # A refused edit is an answer (applied=false, the reason), not an error: hosts such as
            # Hermes switch a server off after three errors in a row.
            bad = await client.call_tool("rl_edit_config", args)
            assert not bad.is_error and bad.structured_content["applied"] is False, (args, bad.content)
            assert needle in bad.structured_content["refused"] and needle in bad.content[0].text, (args, bad.content)
        current = (await client.call_tool("rl_get_current_config", {})).structured_content
        fields = {f["name"]: f for f in current["configurable_fields"]}
        assert fields["max_count"]["current_value"] == 33
        assert "worker_timeout" in {f["name"] for f in current["locked_fields"]}
        assert "wandb_project" in {o["name"] for o in current["run_options"]}


async def test_config_before_select_is_an_answer_not_an_error(home, mode):
    # Hosts count errors against the server (Hermes: three in a row); this is a first step.
    async with Client(server(home), mode=mode) as client:
        result = await client.call_tool("rl_get_current_config", {})
        assert not result.is_error and "rl_select_environment" in result.content[0].text
        edit = await client.call_tool("rl_edit_config", {"field": "group_size", "value": 8})
        assert not edit.is_error and edit.structured_content["kind"] == "environment"


async def test_fallback_reason_is_reported(home):
    async with Client(server(home)) as client:
        result = await client.call_tool("rl_select_environment", {"name": "raising"})
    assert result.structured_content["config_source"] == "fallback"
    assert "needs configs/default.yaml" in result.structured_content["fallback_reason"]


async def test_resources(home, mode):
    async with Client(server(home), mode=mode) as client:
        uris = {str(r.uri) for r in (await client.list_resources()).resources}
        assert {"rl://environments", "rl://config/current", "rl://config/locked"} <= uris
        templates = {t.uri_template for t in (await client.list_resource_templates()).resource_templates}
        assert "rl://environments/{+name}" in templates
        env = await client.read_resource("rl://environments/counting")
        assert "class CountingEnv" in env.contents[0].text
        before = await client.read_resource("rl://config/current")
        assert '"environment": null' in before.contents[0].text
        locked = await client.read_resource("rl://config/locked")
        assert '"worker_timeout"' in locked.contents[0].text
        with pytest.raises(Exception, match="Unknown environment"):
            await client.read_resource("rl://environments/nope")


async def test_stdio_server_and_restart_persistence(home):
    params = stdio_params(home, MCP_RL_ENV_PATHS=ENV_PATHS)
    async with Client(params) as client:
        assert not (await client.call_tool("rl_select_environment", {"name": "counting"})).is_error
        assert not (await client.call_tool("rl_edit_config", {"field": "max_count", "value": 77})).is_error
    # A new server process continues where the last one stopped.
    async with Client(params, mode="legacy") as client:
        current = (await client.call_tool("rl_get_current_config", {})).structured_content
    assert current["environment"] == "counting"
    assert {f["name"]: f["current_value"] for f in current["configurable_fields"]}["max_count"] == 77


def test_no_heavy_imports_on_the_startup_path(home):
    code = textwrap.dedent(
        """
        import sys, anyio
        from mcp import Client
        from mcp_rl.server import build_server
        async def main():
            async with Client(build_server()) as c:
                await c.list_tools()
                await c.call_tool("rl_list_environments", {})
        anyio.run(main)
        print(",".join(m for m in ("torch", "transformers", "atroposlib", "wandb", "tinker", "scipy") if m in sys.modules))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=make_env(home), cwd=REPO, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == ""
