"""An environment from a repository, the whole way through a real stdio MCP client.

The fixture repository's `packaged_arithmetic` is a package module with relative imports, an
OpenAI client created at import and a config_init() that reads configs/ from the repository
root. Listed, selected, smoke-tested against the embedded model (Atropos process mode through
the shared runner) and trained for two steps on the local backend: the same loading rules at
every stage.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from mcp import Client

from mcp_rl.settings import Settings
from tests.conftest import FIXTURES, make_env, stdio_params
from tests.kit.mcp import SHORT_RUN, ok
from tests.kit.smoke_tests import read_until_done
from tests.supervisor.test_e2e_training import (
    wait_nothing_left,
    wait_status,
)

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

ENVS = FIXTURES / "repos" / "research_repo" / "environments"


async def test_repository_environment_lists_selects_smoke_tests_and_trains(home: Path) -> None:
    params = stdio_params(home, MCP_RL_ENV_PATHS=str(ENVS), MCP_RL_INTROSPECT_WORKER_IDLE="120")
    async with Client(params) as client:
        listed = await ok(client, "rl_list_environments")
        entries = {e["name"]: e for e in listed["environments"]}
        assert {"packaged_arithmetic", "counter", "game_environments/counter/counter", "gsm8k"} <= set(entries)
        assert entries["multilingual"]["missing_modules"] == ["langdetect"]
        assert listed["duplicates"][0]["others_as"] == ["game_environments/counter/counter"]

        missing = await client.call_tool("rl_select_environment", {"name": "multilingual"})
        assert missing.is_error and "pip install langdetect" in missing.content[0].text

        selected = await ok(client, "rl_select_environment", {"name": "packaged_arithmetic"})
        assert selected["config_source"] == "config_init", selected
        current = await ok(client, "rl_get_current_config")
        fields = {f["name"]: f["current_value"] for f in current["configurable_fields"]}
        assert fields["max_operand"] == 5  # from the repository's configs/packaged.yaml

        answer = await ok(client, "rl_test_inference", {"num_steps": 1, "group_size": 2, "models": ["local"]})
        result = answer if answer["state"] != "running" else await read_until_done(client, answer["resource"])
        local = result["models_tested"][0]
        assert local["state"] == "succeeded", (local.get("error"), local.get("log_tail"))
        assert local["total_completions"] == 2

        for field, value in SHORT_RUN.items():
            await ok(client, "rl_edit_config", {"field": field, "value": value})
        started = await ok(client, "rl_start_training")
        run_id = started["run_id"]
        done = await wait_status(client, run_id, {"completed"})
        assert done["metrics"]["step"] == SHORT_RUN["total_steps"]
    await wait_nothing_left(Settings.from_env(make_env(home)), run_id)
