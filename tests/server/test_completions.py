"""completion/complete through a real MCP client (in memory, both protocol eras): every argument
whose set is known completes from the same state the tools read."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from mcp import Client
from mcp.types import PromptReference, ResourceTemplateReference

from mcp_rl.environments import gem_catalog
from mcp_rl.server import build_server
from mcp_rl.server.completions import MAX_VALUES, rank
from mcp_rl.settings import Settings
from tests.conftest import FIXTURES, make_env
from tests.server.conftest import record_run

pytestmark = pytest.mark.anyio


@pytest.fixture
def settings(home: Path) -> Settings:
    return Settings.from_env(make_env(home, MCP_RL_ENV_PATHS=str(FIXTURES / "envs" / "good")))


def prompt(name: str) -> PromptReference:
    return PromptReference(type="ref/prompt", name=name)


def template(uri: str) -> ResourceTemplateReference:
    return ResourceTemplateReference(type="ref/resource", uri=uri)


async def complete(client: Client, ref, name: str, value: str, context: dict[str, str] | None = None) -> list[str]:
    result = await client.complete(ref, {"name": name, "value": value}, context_arguments=context)
    return result.completion.values


def test_rank_puts_prefix_matches_first_and_caps_the_answer() -> None:
    found = rank(["gem", "arithmetic", "game:Wordle", "counting", "arithmetic"], "ar")
    assert found.values == ["arithmetic"] and found.total == 1
    found = rank(["game:Wordle-v0", "wordle-like", "other"], "WORD")
    assert found.values == ["wordle-like", "game:Wordle-v0"]  # prefix first, then contains
    many = rank([f"run{i:03d}" for i in range(150)], "run")
    assert len(many.values) == MAX_VALUES and many.total == 150 and many.has_more is True
    assert rank(["a", "b"], "", prefix="x,").values == ["x,a", "x,b"]


async def test_environment_names_for_prompts_and_the_environment_template(settings, mode) -> None:
    async with Client(build_server(settings), mode=mode) as client:
        for ref, name in (
            (prompt("train_environment"), "environment"),
            (prompt("smoke_test_models"), "environment"),
            (template("rl://environments/{+name}"), "name"),
        ):
            values = await complete(client, ref, name, "ari")
            assert values[0] == "arithmetic" and all("ari" in v.lower() for v in values)  # GEM's rg:*arithmetic after
            assert "counting" in await complete(client, ref, name, "")  # from MCP_RL_ENV_PATHS
        assert await complete(client, prompt("train_environment"), "environment", "no-such-thing") == []


async def test_duplicate_names_complete_as_what_rl_select_environment_takes(home) -> None:
    repository = FIXTURES / "repos" / "research_repo" / "environments"  # two environments named "counter"
    settings = Settings.from_env(make_env(home, MCP_RL_ENV_PATHS=str(repository)))
    async with Client(build_server(settings)) as client:
        offered = await complete(client, prompt("train_environment"), "environment", "")
        assert {"counter", "game_environments/counter/counter"} <= set(offered)
        # {+name} keeps the "/": the qualified name fills rl://environments/{+name} and reads it.
        in_template = await complete(client, template("rl://environments/{+name}"), "name", "")
        assert {"counter", "game_environments/counter/counter"} <= set(in_template)
        read = await client.read_resource("rl://environments/game_environments/counter/counter")
        assert '"game_environments/counter/counter"' in read.contents[0].text


@pytest.mark.skipif(gem_catalog.installed_version() is None, reason="gem-llm not installed")
async def test_gem_ids_complete_once_the_catalog_is_read(settings) -> None:
    server = build_server(settings)
    async with Client(server) as client:
        await client.call_tool("rl_list_environments", {"filter": "game"})  # reads the GEM catalog
        values = await complete(client, prompt("train_environment"), "environment", "game:guess")
    assert "game:GuessTheNumber-v0-easy" in values and all(v.lower().startswith("game:guess") for v in values)


async def test_run_ids_newest_first_and_lists_skip_chosen_ids(settings, mode) -> None:
    now = time.time()
    for i, run_id in enumerate(("aaa11111", "aab22222", "bbb33333")):
        record_run(settings, run_id, now - 100 + i)
    async with Client(build_server(settings), mode=mode) as client:
        assert await complete(client, prompt("diagnose_run"), "run_id", "") == ["bbb33333", "aab22222", "aaa11111"]
        assert await complete(client, prompt("diagnose_run"), "run_id", "aa") == ["aab22222", "aaa11111"]
        for uri in ("rl://runs/{run_id}", "rl://runs/{run_id}/logs/{process}{?tail}", "rl://runs/{run_id}/plot.png"):
            assert await complete(client, template(uri), "run_id", "bb") == ["bbb33333"]
        # compare_runs takes a comma-separated list: the last item completes, chosen ids are not offered
        assert await complete(client, prompt("compare_runs"), "run_ids", "aab22222,") == [
            "aab22222,bbb33333",
            "aab22222,aaa11111",
        ]


async def test_process_names_of_a_run_log(settings, mode) -> None:
    async with Client(build_server(settings), mode=mode) as client:
        ref = template("rl://runs/{run_id}/logs/{process}{?tail}")
        assert set(await complete(client, ref, "process", "")) == {"api", "trainer", "env", "supervisor"}
        assert await complete(client, ref, "process", "t") == ["trainer"]


async def test_test_ids_and_their_model_folders(settings, mode) -> None:
    for test_id, models in (("20260101T000000-aaaa", ["local"]), ("20260102T000000-bbbb", ["local", "qwen_qwen3-8b"])):
        folder = settings.tests_dir / test_id
        for model in models:
            (folder / model).mkdir(parents=True)
        (folder / "test.json").write_text(json.dumps({"test_id": test_id}))
    (settings.tests_dir / "not-a-test").mkdir()  # no test.json: never offered
    async with Client(build_server(settings), mode=mode) as client:
        ref = template("rl://tests/{test_id}/{model}")
        assert await complete(client, template("rl://tests/{test_id}"), "test_id", "") == [
            "20260102T000000-bbbb",
            "20260101T000000-aaaa",
        ]
        assert await complete(client, ref, "model", "", {"test_id": "20260102T000000-bbbb"}) == [
            "local",
            "qwen_qwen3-8b",
        ]
        assert await complete(client, ref, "model", "q", {"test_id": "20260102T000000-bbbb"}) == ["qwen_qwen3-8b"]
        assert await complete(client, ref, "model", "", {"test_id": "../etc"}) == []
        assert await complete(client, ref, "model", "") == []  # no test_id yet: nothing known


async def test_model_ids_for_the_smoke_test_prompt(settings, mode) -> None:
    async with Client(build_server(settings), mode=mode) as client:
        values = await complete(client, prompt("smoke_test_models"), "models", "")
        assert values[0] == "local" and "qwen/qwen3-8b" in values
        assert await complete(client, prompt("smoke_test_models"), "models", "local, qwen/qwen3-") == [
            "local, qwen/qwen3-8b"
        ]


async def test_config_fields_are_run_options_then_the_selected_environments_fields(settings) -> None:
    async with Client(build_server(settings)) as client:
        before = await complete(client, prompt("tune_config"), "field", "")
        assert {"learning_rate", "total_steps", "batch_size", "lora_rank"} <= set(before)
        assert "group_size" not in before  # an environment field: none selected yet
        assert not (await client.call_tool("rl_select_environment", {"name": "arithmetic"})).is_error
        after = await complete(client, prompt("tune_config"), "field", "")
        assert "group_size" in after and "learning_rate" in after
        assert await complete(client, prompt("tune_config"), "field", "learning") == ["learning_rate"]


async def test_arguments_without_a_known_set_complete_to_nothing(settings, mode) -> None:
    async with Client(build_server(settings), mode=mode) as client:
        assert await complete(client, prompt("train_environment"), "goal", "be") == []
        assert await complete(client, template("rl://runs/{run_id}/logs/{process}{?tail}"), "tail", "1") == []
