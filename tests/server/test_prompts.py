"""The workflow prompts through a real MCP client (in memory, both protocol eras): listed with
titles and argument descriptions, rendered with the arguments, naming only tools and resources
the server has, and refusing bad arguments with the reason."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from mcp import Client, MCPError

from mcp_rl.server import build_server
from mcp_rl.server.prompts import CAUSE_CHARS
from mcp_rl.settings import Settings
from mcp_rl.supervisor import service
from mcp_rl.supervisor.states import RunState
from tests.conftest import make_env
from tests.server.conftest import record_run

pytestmark = pytest.mark.anyio

PROMPTS = {"train_environment", "diagnose_run", "compare_runs", "smoke_test_models", "tune_config"}


@pytest.fixture
def settings(home: Path) -> Settings:
    return Settings.from_env(make_env(home))


async def text_of(client: Client, name: str, arguments: dict[str, str]) -> str:
    result = await client.get_prompt(name, arguments)
    assert len(result.messages) == 1 and result.messages[0].role == "user"
    return result.messages[0].content.text


def uri_matches_template(uri: str, templates: set[str], statics: set[str]) -> bool:
    uri = uri.split("?")[0].rstrip(".,;:)'")
    if uri in statics:
        return True
    for template in templates:
        pattern = re.escape(re.sub(r"\{\?[^}]*\}", "", template))
        pattern = re.sub(r"\\\{[a-z_]+\\\}", "[^/]+", pattern)
        if re.fullmatch(pattern, uri):
            return True
    return False


async def test_prompts_are_listed_with_titles_and_described_arguments(settings, mode) -> None:
    async with Client(build_server(settings), mode=mode) as client:
        prompts = {p.name: p for p in (await client.list_prompts()).prompts}
    assert set(prompts) == PROMPTS
    for prompt in prompts.values():
        assert prompt.title and prompt.description, prompt.name
        for argument in prompt.arguments or []:
            assert argument.description, (prompt.name, argument.name)
    required = {name: {a.name for a in p.arguments or [] if a.required} for name, p in prompts.items()}
    assert required == {
        "train_environment": set(),
        "diagnose_run": {"run_id"},
        "compare_runs": {"run_ids"},
        "smoke_test_models": set(),
        "tune_config": {"field"},
    }


async def test_every_prompt_names_only_tools_and_resources_the_server_has(settings, mode) -> None:
    record_run(settings, "aaa11111")
    record_run(settings, "bbb22222")
    arguments = {
        "train_environment": [{}, {"environment": "arithmetic", "goal": "add faster"}],
        "diagnose_run": [{"run_id": "aaa11111"}],
        "compare_runs": [{"run_ids": "aaa11111, bbb22222"}],
        "smoke_test_models": [{}, {"environment": "arithmetic", "models": "local,qwen/qwen3-8b", "num_steps": "2"}],
        "tune_config": [{"field": "learning_rate", "goal": "stabler loss"}],
    }
    assert set(arguments) == PROMPTS
    async with Client(build_server(settings), mode=mode) as client:
        tools = {t.name for t in (await client.list_tools()).tools}
        templates = {t.uri_template for t in (await client.list_resource_templates()).resource_templates}
        statics = {str(r.uri) for r in (await client.list_resources()).resources}
        for name, cases in arguments.items():
            for case in cases:
                text = await text_of(client, name, case)
                named = set(re.findall(r"\brl_[a-z_]+", text))
                assert named and named <= tools, (name, named - tools)
                for uri in re.findall(r"rl://[^\s`]+", text):
                    concrete = uri.replace("<test_id>", "t1").replace("<model>", "m")
                    assert uri_matches_template(concrete, templates, statics), (name, uri)


async def test_train_environment_walks_the_whole_workflow_in_order(settings, mode) -> None:
    async with Client(build_server(settings), mode=mode) as client:
        text = await text_of(client, "train_environment", {"environment": "arithmetic", "goal": "add faster"})
        chosen = await text_of(client, "train_environment", {})
    steps = re.split(r"\n\d\. ", text)[1:]
    expected = [
        "rl_select_environment('arithmetic')",
        "rl_edit_config",
        "rl_test_inference",
        "confirm",
        "rl_start_training",
        "rl_check_status",
        "rl_get_results",
    ]
    assert len(steps) == len(expected)
    for step, needed in zip(steps, expected):
        assert needed in step, (needed, step)
    assert "add faster" in text and "local CPU backend" in text  # no TINKER_API_KEY in the test environment
    assert chosen.find("rl_list_environments") < chosen.find("rl_select_environment")


async def test_diagnose_and_compare_use_the_run_ids(settings, mode) -> None:
    record_run(settings, "aaa11111")
    record_run(settings, "bbb22222")
    service.registry_for(settings).transition(
        "aaa11111", RunState.FAILED, "trainer exited with 1:\n" + "x" * (CAUSE_CHARS + 50)
    )
    async with Client(build_server(settings), mode=mode) as client:
        text = await text_of(client, "diagnose_run", {"run_id": " aaa11111 "})
        assert "rl_check_status('aaa11111')" in text and "rl://runs/aaa11111/logs/trainer" in text
        assert "- aaa11111: failed, environment arithmetic, backend local; cause: trainer exited with 1: " in text
        (line,) = [line for line in text.splitlines() if line.startswith("- aaa11111: ")]
        cause = line.split("; cause: ", 1)[1]
        assert len(cause) == CAUSE_CHARS + 3 and cause.endswith("x...")  # a pointer, cut; one line
        text = await text_of(client, "compare_runs", {"run_ids": "aaa11111,bbb22222,aaa11111"})
        assert "rl_get_results('aaa11111', include_plot=false)" in text
        assert "rl_get_results('bbb22222', include_plot=false)" in text
        assert text.count("rl_get_results('aaa11111'") == 1  # a repeated id is compared once
        assert "- bbb22222: starting, environment arithmetic, backend local\n" in text


@pytest.mark.parametrize(
    ("name", "arguments", "message"),
    [
        ("diagnose_run", {"run_id": "nope"}, "Unknown run id(s): nope"),
        ("compare_runs", {"run_ids": "aaa11111"}, "Give 2 to 6 different run ids"),
        ("compare_runs", {"run_ids": "aaa11111,nope"}, "Unknown run id(s): nope"),
        ("smoke_test_models", {"num_steps": "50"}, "num_steps must be a whole number from 1 to 20"),
        ("smoke_test_models", {"num_steps": "two"}, "num_steps must be a whole number from 1 to 20"),
        ("tune_config", {"field": "  "}, "field is empty"),
    ],
)
async def test_bad_arguments_are_refused_with_the_reason(settings, name, arguments, message) -> None:
    record_run(settings, "aaa11111")
    async with Client(build_server(settings)) as client:
        with pytest.raises(MCPError) as caught:
            await client.get_prompt(name, arguments)
    assert message in str(caught.value)
    assert "rl_list_runs" in str(caught.value) or "Unknown" not in message


async def test_prompts_say_what_costs_money(home) -> None:
    keyed = Settings.from_env(make_env(home, TINKER_API_KEY="tml-fake", OPENROUTER_API_KEY="sk-or-fake"))
    async with Client(build_server(keyed)) as client:
        train = await text_of(client, "train_environment", {})
        smoke = await text_of(client, "smoke_test_models", {})
    assert "Tinker credits" in train and "OpenRouter credits" in train
    assert "OpenRouter credits" in smoke
    assert "tml-fake" not in train + smoke and "sk-or-fake" not in train + smoke


def test_the_held_out_fields_the_train_prompt_names_exist(settings) -> None:
    # Issue 44: the agent is led to the verdict, its baselines, the answers' shape and the warnings;
    # a field renamed in the summary must not leave the prompt pointing at nothing.
    from types import SimpleNamespace

    from mcp_rl.proof.summary import HeldOutSummary
    from mcp_rl.server.prompts import train_environment_text

    text = train_environment_text(SimpleNamespace(settings=settings), None, None)  # only its settings are read
    named = set(re.findall(r"held_out\.([a-z_]+)", text))
    assert {"sentence", "constant_baseline", "learned", "answers", "groups", "warnings", "thresholds"} <= named
    assert named <= set(HeldOutSummary.model_fields), named - set(HeldOutSummary.model_fields)
    assert "max_tokens" in text and "repeating the prompt" in text and "degenerate_replies" in text
