"""rl_get_results, rl://runs/{id}/plot.png and run notifications through a real MCP client
(in memory), in both protocol eras."""

from __future__ import annotations

import base64
import io
import json
import socket
import time
import warnings
from pathlib import Path

import anyio
import pytest
from mcp import Client
from mcp.types import ImageContent, ResourceLink, TextContent

from mcp_rl.metrics import store, wandb_reader
from mcp_rl.metrics.plot import HEIGHT_PX, WIDTH_PX
from mcp_rl.server.app import build_server
from mcp_rl.settings import Settings
from mcp_rl.supervisor.results import get_results
from tests.conftest import make_env
from tests.fakes.wandb_server import API_KEY, ENTITY, WandbServer, recorded_group
from tests.kit.runs import reward_at, write_run

MODES = ["auto", "legacy"]


def _decode_png(data: bytes) -> tuple[int, int]:
    from PIL import Image

    image = Image.open(io.BytesIO(data))
    image.load()
    return image.size


@pytest.mark.anyio
@pytest.mark.parametrize("mode", MODES)
async def test_results_of_a_2000_step_run(settings: Settings, mode: str) -> None:
    steps = 2000
    run_dir = write_run(settings, "long2000", steps, env_metrics=True)
    async with Client(build_server(settings), mode=mode) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        tool = tools["rl_get_results"]
        assert tool.annotations.read_only_hint is True and tool.annotations.open_world_hint is True
        assert "history" in tool.output_schema["properties"]

        started = time.perf_counter()
        result = await client.call_tool("rl_get_results", {"run_id": "long2000"})
        first = time.perf_counter() - started
        started = time.perf_counter()
        await client.call_tool("rl_get_results", {"run_id": "long2000"})
        second = time.perf_counter() - started
    print(f"rl_get_results on {steps} steps: first {first:.3f} s (plot drawn), then {second:.3f} s (plot cached)")
    assert not result.is_error, result.content
    data = result.structured_content
    assert data["state"] == "completed" and data["steps_completed"] == steps and data["num_steps"] == steps
    reward = data["metrics"]["reward/mean"]
    assert reward["final"] == reward_at(steps, steps) and reward["final_step"] == steps
    assert data["metrics"]["train/loss"]["best_step"] == steps
    assert data["metrics"]["eval/percent_correct"]["final"] == 0.75
    assert len(data["history"]) <= store.MAX_HISTORY_POINTS and data["history_steps_total"] == steps
    assert data["history"][0]["step"] == 1 and data["history"][-1]["step"] == steps
    weights = data["weights"]
    assert weights["sampler_exists"] is True and Path(weights["sampler_weights"]).is_dir()
    assert weights["sampler_weights"].startswith(str(run_dir))
    assert data["wandb"]["mode"] == "disabled" and data["wandb_url"] is None

    images = [c for c in result.content if isinstance(c, ImageContent)]
    assert len(images) == 1 and images[0].mime_type == "image/png"
    assert _decode_png(base64.b64decode(images[0].data)) == (WIDTH_PX, HEIGHT_PX)
    links = {c.uri for c in result.content if isinstance(c, ResourceLink)}
    assert {"rl://runs/long2000/plot.png", "rl://runs/long2000/metrics", "rl://runs/long2000/logs/trainer"} <= links
    texts = [c.text for c in result.content if isinstance(c, TextContent)]
    assert "long2000: completed" in texts[0] and json.loads(texts[1])["run_id"] == "long2000"
    # Bounded output whatever the run length: well under client limits (Claude Code warns at 10k tokens).
    assert len(texts[1]) < 20_000
    assert second < 6.0  # cached plot; generous for a loaded machine


@pytest.mark.anyio
async def test_results_without_the_plot(settings: Settings) -> None:
    write_run(settings, "noplot", 10)
    async with Client(build_server(settings)) as client:
        result = await client.call_tool("rl_get_results", {"run_id": "noplot", "include_plot": False})
    assert not result.is_error
    assert not [c for c in result.content if isinstance(c, ImageContent)]
    assert any(isinstance(c, ResourceLink) and c.uri.endswith("/plot.png") for c in result.content)
    assert result.structured_content["steps_completed"] == 10


@pytest.mark.anyio
@pytest.mark.parametrize("mode", MODES)
async def test_unknown_run_is_an_answer_pointing_at_rl_list_runs(settings: Settings, mode: str) -> None:
    async with Client(build_server(settings), mode=mode) as client:
        for run_id in ("nope", "../etc"):
            result = await client.call_tool("rl_get_results", {"run_id": run_id})
            # An answer, not an error (server/exploring.py): hosts count errors against the server.
            assert not result.is_error and result.structured_content["found"] is False
            assert "rl_list_runs" in result.content[0].text


@pytest.mark.anyio
@pytest.mark.parametrize("mode", MODES)
async def test_plot_resource_is_a_png(settings: Settings, mode: str) -> None:
    write_run(settings, "plotted", 40)
    async with Client(build_server(settings), mode=mode) as client:
        templates = {t.uri_template for t in (await client.list_resource_templates()).resource_templates}
        assert "rl://runs/{run_id}/plot.png" in templates
        read = await client.read_resource("rl://runs/plotted/plot.png")
        content = read.contents[0]
        assert content.mime_type == "image/png"
        assert _decode_png(base64.b64decode(content.blob)) == (WIDTH_PX, HEIGHT_PX)
        with pytest.raises(Exception, match="Unknown run_id"):
            await client.read_resource("rl://runs/missing/plot.png")


@pytest.mark.anyio
async def test_results_while_wandb_is_unreachable_still_answer_with_a_note(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real wandb client, a key, and a W&B host that refuses connections."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        monkeypatch.setenv("WANDB_BASE_URL", f"http://127.0.0.1:{s.getsockname()[1]}")
        settings = Settings.from_env(make_env(home, WANDB_API_KEY="f" * 40, MCP_RL_WANDB_TIMEOUT="4"))
        write_run(settings, "wboff", 12, wandb_enabled=True)
        started = time.perf_counter()
        async with Client(build_server(settings)) as client:
            result = await client.call_tool("rl_get_results", {"run_id": "wboff"})
        elapsed = time.perf_counter() - started
    assert not result.is_error
    data = result.structured_content
    assert data["metrics"]["reward/mean"]["final_step"] == 12
    assert data["wandb"]["mode"] == "online" and data["wandb_url"] is None
    wandb_notes = [n for n in data["notes"] if "W&B" in n]
    assert len(wandb_notes) == 1 and ("failed" in wandb_notes[0] or "did not answer" in wandb_notes[0])
    assert "f" * 40 not in json.dumps(data)
    assert elapsed < 15


@pytest.mark.anyio
async def test_offline_wandb_answers_from_local_metrics(home: Path) -> None:
    settings = Settings.from_env(make_env(home, WANDB_MODE="offline"))
    run_dir = write_run(settings, "wbofflinerun", 5, wandb_enabled=True)
    offline_dir = run_dir / "wandb" / "offline-run-20261122_060000-abcd1234"
    offline_dir.mkdir(parents=True)
    results = await get_results(settings, "wbofflinerun")
    assert results.wandb.mode == "offline" and results.metrics["reward/mean"].final_step == 5
    assert any(str(offline_dir) in n and "wandb sync" in n for n in results.notes)


@pytest.mark.anyio
async def test_wandb_adds_its_url_and_fills_missing_metrics(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The real wandb client, found through WANDB_BASE_URL as a user's would, against a loopback W&B."""
    monkeypatch.setattr(wandb_reader, "_APIS", {})  # a client of another test's W&B is not this one
    with WandbServer(recorded_group("wbon")) as server:
        monkeypatch.setenv("WANDB_BASE_URL", server.base_url)
        settings = Settings.from_env(make_env(home, WANDB_API_KEY=API_KEY))
        write_run(settings, "wbon", 20, wandb_enabled=True)
        cache: dict = {}
        results = await get_results(settings, "wbon", cache=cache)
        [runs_query] = [v for name, v in server.queries if name == "Runs"]
        assert json.loads(runs_query["filters"]) == {"group": "wbon"}
        assert results.wandb_url == f"{server.base_url}/{ENTITY}/mcp-rl/runs/tr4in3r1"
        # Local values are the reference; the env's accuracy (not captured locally here) comes from W&B.
        assert results.metrics["reward/mean"].source == "local"
        assert results.metrics["train/percent_correct"].source == "wandb"
        # A second call within the TTL reuses the answer: no request reaches W&B.
        asked = len(server.queries)
        await get_results(settings, "wbon", cache=cache)
        assert len(server.queries) == asked and server.unauthorized == 0


def _append_step(run_dir: Path) -> None:
    with open(run_dir / "metrics.jsonl", "a", encoding="utf-8") as fh:
        fh.write(json.dumps({"step": 99, "reward/mean": 0.5, "train/loss": 0.1}) + "\n")


async def _drain(next_uri) -> None:
    """Drop notifications already delivered (e.g. a second one from acting twice above), so
    the next phase only counts its own. Two watcher intervals cover any poll in flight."""
    with anyio.move_on_after(0.3):
        while True:
            await next_uri()


async def _until_updated(act, next_uri, uri: str, deadline: float = 10.0) -> None:
    """Act until an update for `uri` arrives: the watcher's first look is only its baseline, so a
    change made before it cannot be heard; a change made after it must be, within the deadline."""
    with anyio.fail_after(deadline):
        while True:
            act()
            with anyio.move_on_after(0.5):
                while await next_uri() != uri:
                    pass
                return


@pytest.mark.anyio
async def test_listen_hears_a_step_land_and_a_state_change(settings: Settings) -> None:
    """2026-07-28: subscriptions/listen on rl://runs/{id}."""
    from mcp.client.subscriptions import ResourceUpdated

    from mcp_rl.supervisor.registry import Registry
    from mcp_rl.supervisor.states import RunState

    settings = settings.model_copy(update={"watch_interval_s": 0.1})
    run_dir = write_run(settings, "live", 3, state="starting")
    uri = "rl://runs/live"
    async with Client(build_server(settings)) as client:
        async with client.listen(resource_subscriptions=[uri]) as sub:

            async def next_uri() -> str:
                event = await sub.__anext__()
                assert isinstance(event, ResourceUpdated)
                return event.uri

            await _until_updated(lambda: _append_step(run_dir), next_uri, uri)
            await _drain(next_uri)
            registry = Registry(settings.state_db)
            await _until_updated(lambda: registry.transition("live", RunState.RUNNING), next_uri, uri)
            assert registry.get_run("live").state == RunState.RUNNING


@pytest.mark.anyio
async def test_legacy_subscribe_hears_a_step_land_and_a_state_change(settings: Settings) -> None:
    """2025-11-25: resources/subscribe, then notifications/resources/updated on the session."""
    from mcp.types import ResourceUpdatedNotification

    from mcp_rl.supervisor.registry import Registry
    from mcp_rl.supervisor.states import RunState

    settings = settings.model_copy(update={"watch_interval_s": 0.1})
    run_dir = write_run(settings, "live2", 3, state="starting")
    uri = "rl://runs/live2"
    send, receive = anyio.create_memory_object_stream[str](16)

    async def on_message(message) -> None:
        message = getattr(message, "root", message)
        if isinstance(message, ResourceUpdatedNotification):
            await send.send(str(message.params.uri))

    async with Client(build_server(settings), mode="legacy", message_handler=on_message) as client:
        assert client.server_capabilities.resources.subscribe is True
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # deprecated in 2026-era clients, the way 2025 hosts subscribe
            await client.subscribe_resource(uri)
        await _until_updated(lambda: _append_step(run_dir), receive.receive, uri)
        await _drain(receive.receive)
        registry = Registry(settings.state_db)
        await _until_updated(lambda: registry.transition("live2", RunState.RUNNING), receive.receive, uri)

        # Unsubscribed (from another request of the same client): silence. Proven by a second
        # subscription on another run, which is heard while the first one stays quiet.
        other_dir = write_run(settings, "live3", 3, state="starting")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            await client.unsubscribe_resource(uri)
            await client.subscribe_resource("rl://runs/live3")
        await _drain(receive.receive)  # anything still queued from before the unsubscribe

        def both() -> None:
            _append_step(run_dir)
            _append_step(other_dir)

        heard: list[str] = []

        async def next_uri() -> str:
            heard.append(await receive.receive())
            return heard[-1]

        await _until_updated(both, next_uri, "rl://runs/live3")
        assert uri not in heard
