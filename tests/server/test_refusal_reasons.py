"""Issue 43 items 2, 4, 5, 6, 7 through real MCP clients: a turned service URL, YAML-isms and
oversized values are refused with the reason; racing edits each answer the revision they wrote;
the scaffold refuses a taken name or a folder outside the searched ones with the reason; a
validator child whose last line is not the report still gets a reason."""

from __future__ import annotations

import json
import shutil
import textwrap
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from mcp_rl.config import Session, config_revision
from mcp_rl.runconfig import EnvironmentRef
from mcp_rl.server import build_server
from mcp_rl.settings import Settings
from tests.conftest import FIXTURES, make_env, stdio_params

pytestmark = pytest.mark.anyio
ENV_PATHS = str(FIXTURES / "envs" / "good")
FAKE_KEY = "tml-fake-key-never-sent-0123456789"


def server(home: Path, env_paths: str = ENV_PATHS):
    return build_server(Settings.from_env(make_env(home, MCP_RL_ENV_PATHS=env_paths)))


async def edit(client: Client, field: str, value: Any) -> dict[str, Any]:
    result = await client.call_tool("rl_edit_config", {"field": field, "value": value})
    assert not result.is_error, result.content
    return result.structured_content


async def test_turned_urls_and_yaml_values_are_refused_over_stdio(home: Path) -> None:
    async with Client(stdio_params(home, MCP_RL_ENV_PATHS=ENV_PATHS, TINKER_API_KEY=FAKE_KEY)) as client:
        assert not (await client.call_tool("rl_select_environment", {"name": "counting"})).is_error
        await edit(client, "max_cost_usd", 40)
        for field, value, why in [
            ("tinker_base_url", "http://169.254.169.254/latest/meta-data/", "MCP_RL_TINKER_HOSTS"),
            ("tinker_base_url", "https://evil.example.com/tinker", "MCP_RL_TINKER_HOSTS"),
            ("tinker_base_url", "https://k:s@tinker.thinkingmachines.dev", "user name or password"),
            ("ray_address", "http://169.254.169.254", "link-local"),
            ("max_cost_usd", "1:30", "JSON"),
            ("max_cost_usd", "~", "JSON"),
            ("total_steps", "0x0A", "JSON"),
            ("max_count", "x" * 5_000_000, "64 KiB"),
        ]:
            answer = await edit(client, field, value)
            assert answer["applied"] is False and why in answer["refused"], (field, answer)
            assert len(json.dumps(answer)) < 5_000
        hosted = await edit(client, "tinker_base_url", "https://TINKER.THINKINGMACHINES.DEV./services/tinker-prod")
        assert hosted["value"] == "https://tinker.thinkingmachines.dev/services/tinker-prod"
        await edit(client, "account", "12345")
        current = (await client.call_tool("rl_get_current_config", {})).structured_content
        options = {o["name"]: o["current_value"] for o in current["run_options"]}
        assert options["max_cost_usd"] == 40 and options["account"] == "12345"
        # Hosted Tinker in any spelling is priced, never "$0, self-hosted".
        assert current["estimated_cost"] is None or not current["estimated_cost"].get("free"), current["estimated_cost"]
        assert "self-hosted" not in json.dumps(current["estimated_cost"])


async def test_racing_edits_each_answer_the_revision_they_wrote(home: Path) -> None:
    async with Client(server(home)) as client:
        assert not (await client.call_tool("rl_select_environment", {"name": "counting"})).is_error
        answers: dict[int, str] = {}

        async def one(n: int) -> None:
            answers[n] = (await edit(client, "total_steps", n))["revision"]

        async with anyio.create_task_group() as tasks:
            for n in range(1, 11):
                tasks.start_soon(one, n)
    session = json.loads((home / "session.json").read_text())
    ref = EnvironmentRef.model_validate(session["environment"])
    for n, revision in answers.items():
        # Every edit replaces the only option edited, so the config each wrote is known exactly.
        assert revision == config_revision(Session(environment=ref, run_options={"total_steps": n})), n


async def test_the_scaffold_refuses_with_the_reason(home: Path, tmp_path: Path) -> None:
    # A copy of the fixtures: the last call writes a file into the first searched folder.
    env_paths = tmp_path / "good"
    shutil.copytree(FIXTURES / "envs" / "good", env_paths, ignore=shutil.ignore_patterns("__pycache__"))
    async with Client(server(home, str(env_paths))) as client:
        for args, why in [
            ({"name": "counting"}, "exists: nothing was written"),  # in the default folder
            ({"name": "counting", "folder": str(home / "envs")}, "already listed"),
            ({"name": "arithmetic"}, "already listed"),
            ({"name": "os"}, "standard library"),
            ({"name": "sitecustomize"}, "Python or mcp-rl imports"),
            ({"name": "mine", "folder": "/"}, "not inside a folder mcp-rl searches"),
            ({"name": "mine", "folder": "/tmp/a\x00b"}, "NUL byte"),
            ({"name": "mine", "folder": "/" + "f" * 5_000}, "characters long"),
        ]:
            result = await client.call_tool("rl_new_environment", args)
            text = result.content[0].text
            assert result.is_error and why in text and len(text) < 1_500, (args, text[:300])
        made = await client.call_tool("rl_new_environment", {"name": "arithmetic_2"})
        assert not made.is_error, made.content
        assert (env_paths / "arithmetic_2.py").is_file()


async def test_a_validator_child_whose_last_line_is_not_the_report_gets_a_reason(home: Path, tmp_path: Path) -> None:
    folder = tmp_path / "tasks"
    folder.mkdir()
    (folder / "noisy_task.py").write_text(
        textwrap.dedent(
            '''
            import atexit

            from mcp_rl.task import Task

            atexit.register(lambda: print("{forged"))  # printed after the report


            class NoisyTask(Task):
                """A task that prints to stdout at exit."""

                name = "noisy_task"

                def train_items(self):
                    return [{"q": str(i), "answer": str(i)} for i in range(300)]

                def held_out_items(self):
                    return [{"q": str(i), "answer": str(i)} for i in range(300, 500)]

                def prompt(self, item):
                    return item["q"]

                def score(self, completion, item):
                    return 1.0 if completion.strip() == item["answer"] else 0.0
            '''
        )
    )
    async with Client(server(home, str(folder))) as client:
        result = await client.call_tool("rl_validate_environment", {"name": "noisy_task", "sample_base_model": False})
    text = result.content[0].text
    if result.is_error:  # the report was read from stdout: the reason is named
        assert "report" in text and "rl_validate_environment" in text, text
    else:  # the report came on a channel the task cannot forge
        assert result.structured_content["status"] in ("passed", "failed"), result.structured_content
