"""rl_test_inference against OpenRouter models, with OpenRouter replaced by a FAKE on loopback.

Everything else is real: the MCP server and client, the detached worker, Atropos `process` mode
of the bundled environment in its own processes, the openai client, the environment's scorer.
Only the paid endpoint is faked (tests/fakes/fake_openrouter.py), and it answers arithmetic
right for every other completion, so the scores the environment computes can be checked.
"""

from __future__ import annotations

import json
import os
import secrets
import threading
from pathlib import Path

import psutil
import pytest
from mcp import Client
from pydantic import SecretStr

from mcp_rl.server import build_server
from mcp_rl.settings import Settings
from tests.fakes.fake_openrouter import FakeOpenRouter, RecordedRequest
from tests.kit.smoke_tests import ENV_NAME, ENV_PATHS, read_until_done

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

GOOD, MALFORMED, FAILING = "fake/good-model", "fake/malformed-model", "fake/failing-model"


class ArgvWatch:
    """Looks at every process's argv whenever the fake gets a request (children are alive then)."""

    def __init__(self, secret: str) -> None:
        self.secret = secret
        self.leaks: list[str] = []
        self.looked = 0
        self._lock = threading.Lock()

    def __call__(self, _request: RecordedRequest) -> None:
        found = []
        for proc in psutil.process_iter(["pid", "cmdline"]):
            cmdline = " ".join(proc.info.get("cmdline") or [])
            if self.secret in cmdline:
                found.append(f"{proc.info['pid']}: {cmdline[:200]}")
        with self._lock:
            self.looked += 1
            self.leaks.extend(found)


def _files_containing(root: Path, secret: bytes) -> list[Path]:
    hits = []
    for path in root.rglob("*"):
        if path.is_file() and secret in path.read_bytes():
            hits.append(path)
    return hits


async def test_openrouter_models_in_parallel_with_a_malformed_and_a_failing_one(home: Path) -> None:
    key = "sk-or-v1-FAKE-" + secrets.token_hex(12)
    watch = ArgvWatch(key)
    behaviours = {MALFORMED: "malformed", FAILING: "fail"}
    with FakeOpenRouter(behaviours=behaviours, on_request=watch) as fake:
        settings = Settings(
            home=home,
            env_paths=ENV_PATHS,
            model_path=Path(os.environ["MCP_RL_MODEL"]),
            openrouter_api_key=SecretStr(key),
            openrouter_base_url=fake.base_url,
        )
        progress: list[tuple[float, float | None, str | None]] = []

        async def on_progress(value: float, total: float | None, message: str | None) -> None:
            progress.append((value, total, message))

        async with Client(build_server(settings)) as client:
            selected = await client.call_tool("rl_select_environment", {"name": ENV_NAME})
            assert not selected.is_error, selected.content
            answer = await client.call_tool(
                "rl_test_inference",
                {"num_steps": 2, "group_size": 4, "models": [GOOD, MALFORMED, FAILING]},
                progress_callback=on_progress,
            )
            assert not answer.is_error, answer.content
            result = answer.structured_content
            # Done or not, the test's resource has the whole answer (while running: the latest state).
            stored = await read_until_done(client, result["resource"])
            if result["state"] == "running":  # a slow machine: the test went on without the call
                result = stored
            listing = json.loads((await client.read_resource("rl://tests")).contents[0].text)
            model_log = (
                (await client.read_resource(stored["models_tested"][1]["resources"]["log"] + "?tail=3"))
                .contents[0]
                .text
            )
            good_links = stored["models_tested"][0]["resources"]
            html = (await client.read_resource(good_links["html"])).contents[0].text
            first_group = (await client.read_resource(good_links["jsonl"] + "?limit=1")).contents[0].text
        answer_text = "".join(getattr(c, "text", "") or "" for c in answer.content)
        links = {str(c.uri) for c in answer.content if c.type == "resource_link"}

    assert result["state"] == "completed", result["message"]
    assert stored["summary"] == result["summary"] and stored["test_id"] == result["test_id"]
    assert [t["test_id"] for t in listing["tests"]] == [result["test_id"]]
    assert len(model_log.splitlines()) == 3
    assert "<html" in html.lower()
    assert (
        len(first_group.splitlines()) == 1
        and json.loads(first_group)["scores"] == result["models_tested"][0]["steps"][0]["scores"]
    )
    by_model = {m["model"]: m for m in result["models_tested"]}
    assert list(by_model) == [GOOD, MALFORMED, FAILING]

    good = by_model[GOOD]
    if answer.structured_content["state"] == "completed":
        # Resource links to the test, and to the JSONL, HTML report and log of a finished model.
        assert {
            result["resource"],
            good["resources"]["jsonl"],
            good["resources"]["html"],
            good["resources"]["log"],
        } <= links
    assert good["state"] == "succeeded", good["error"]
    # The fake answers right for even completion indices: the env's own scorer must find 2 of 4.
    assert good["total_completions"] == 8 and good["correct_completions"] == 4
    assert good["accuracy"] == 0.5 and good["steps_with_correct"] == 2
    assert good["score_std"] > 0
    # The estimate stated before the first request, and what the provider reported after (issue 26).
    estimate = result["test_config"]["cost_estimates"][GOOD]
    assert estimate.startswith("estimated at most $")
    most = float(estimate.split("$")[1].split(":")[0])
    assert 0 < good["usage"]["cost_usd"] <= most
    assert len(good["samples"]) == 2 and {s["score"] > 0 for s in good["samples"]} == {True, False}
    assert all(s["prompt"] and s["completion"] for s in good["samples"])
    assert Path(good["output_file"]).is_file() and Path(good["html_file"]).is_file()

    for bad in (by_model[MALFORMED], by_model[FAILING]):
        assert bad["state"] == "failed"
        assert bad["error"] and bad["log_tail"]
        assert bad["total_completions"] == 0

    summary = result["summary"]
    assert summary["best_model"] == GOOD and summary["environment_working"] is True
    assert summary["models_succeeded"] == 1 and summary["models_finished"] == 3

    # The fake saw the ids asked for, each with the key as a bearer token.
    assert fake.models_seen() == {GOOD, MALFORMED, FAILING}
    assert fake.authorizations() == {f"Bearer {key}"}
    # In parallel: every model had sent its first request before any model finished.
    first = {m: min(r.time for r in fake.requests if r.model == m) for m in (GOOD, MALFORMED, FAILING)}
    assert max(first.values()) < min(m["finished_at"] for m in result["models_tested"])

    # The key went to the children by environment only: in no argv, file, log or answer.
    assert watch.looked > 0 and watch.leaks == []
    assert _files_containing(home, key.encode()) == []
    assert key not in answer_text

    values = [p[0] for p in progress]
    assert values and values == sorted(values) and len(set(values)) == len(values)
    # Once the test runs, progress counts groups: 2 steps x 3 models.
    assert progress[-1][1] == 2 * 3
    if answer.structured_content["state"] == "completed":
        assert values[-1] == 6


async def test_local_and_openrouter_models_together(home: Path) -> None:
    """The local server loads while the OpenRouter model already runs; both are scored."""
    with FakeOpenRouter() as fake:
        settings = Settings(
            home=home,
            env_paths=ENV_PATHS,
            model_path=Path(os.environ["MCP_RL_MODEL"]),
            openrouter_api_key=SecretStr("sk-or-FAKE-mixed"),
            openrouter_base_url=fake.base_url,
        )
        async with Client(build_server(settings)) as client:
            assert not (await client.call_tool("rl_select_environment", {"name": ENV_NAME})).is_error
            answer = await client.call_tool(
                "rl_test_inference", {"num_steps": 1, "group_size": 2, "models": ["local", GOOD]}
            )
            assert not answer.is_error, answer.content
            result = await read_until_done(client, answer.structured_content["resource"])
    assert result["state"] == "completed", result["message"]
    local, remote = result["models_tested"]
    assert (local["model"], local["provider"], remote["model"], remote["provider"]) == (
        "local",
        "local",
        GOOD,
        "openrouter",
    )
    assert local["state"] == remote["state"] == "succeeded", (local["error"], remote["error"])
    assert local["total_completions"] == remote["total_completions"] == 2
    assert remote["accuracy"] == 0.5
    # The remote model did not wait for the local server to load.
    assert remote["started_at"] < local["started_at"]
    # Each model wrote its own files under the test's folder (no `_1` renames of older output).
    test_dir = home / "tests" / result["test_id"]
    assert {Path(m["output_file"]) for m in (local, remote)} == {
        test_dir / "local" / "groups.jsonl",
        test_dir / "fake_good-model" / "groups.jsonl",
    }
    assert not list(test_dir.rglob("groups_1.jsonl"))
