"""rl_test_inference(models=["run:<id>"]) smoke-tests a run's saved checkpoint (base + adapter)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mcp import Client

from mcp_rl.errors import NotFound, UserError
from mcp_rl.inference_test import service
from mcp_rl.inference_test.models import WorkerRecord
from mcp_rl.model_specs import model_slug
from mcp_rl.settings import Settings
from tests.conftest import make_env, stdio_params
from tests.kit.runs import record_checkpoint, write_local_checkpoint_run, write_run_file
from tests.kit.smoke_tests import ENV_NAME, read_until_done


def test_plan_names_the_checkpoint_and_its_adapter(settings: Settings, tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    config = write_run_file(settings, "r1", base_model=str(model))
    adapter = config.paths.checkpoints_dir / "s3" / "adapter"
    adapter.mkdir(parents=True)
    (adapter / "adapter_config.json").write_text("{}")
    record_checkpoint(config, 3, "sampler", str(adapter), final=True)
    (planned,) = service.plan_models(settings, ["run:r1"])
    assert (planned.id, planned.provider, planned.adapter, planned.base_model) == (
        "run:r1@3",
        "local",
        str(adapter),
        str(model.resolve()),
    )
    # No OpenRouter key is needed for a local checkpoint, and the local model keeps its own server.
    both = service.plan_models(settings, ["local", "run:r1@3"])
    assert len({m.server_key for m in both}) == 2
    with pytest.raises(NotFound, match="Saved steps: 3"):
        service.plan_models(settings, ["run:r1@7"])
    tinker = write_run_file(settings, "t1", base_model="Qwen/Qwen3-4B", backend="tinker")
    record_checkpoint(tinker, 1, "sampler", "tinker://s/sampler_weights/1")
    with pytest.raises(UserError, match="rl_evaluate_checkpoint"):
        service.plan_models(settings, ["run:t1"])
    assert not (settings.tests_dir.exists() and any(settings.tests_dir.iterdir()))


@pytest.mark.slow
@pytest.mark.anyio
async def test_smoke_test_of_a_run_checkpoint(home: Path, model_dir: Path) -> None:
    settings = Settings.from_env(make_env(home))
    write_local_checkpoint_run(settings, "r1", model_dir, steps=(2,))
    async with Client(stdio_params(home)) as client:
        selected = await client.call_tool("rl_select_environment", {"name": ENV_NAME})
        assert not selected.is_error, selected.content
        answer = await client.call_tool("rl_test_inference", {"num_steps": 1, "group_size": 2, "models": ["run:r1"]})
        assert not answer.is_error, answer.content
        result = answer.structured_content
        if result["state"] == "running":
            result = await read_until_done(client, result["resource"])
    (tested,) = result["models_tested"]
    assert tested["model"] == "run:r1@2"
    assert tested["state"] == "succeeded", (tested["error"], tested["log_tail"])
    assert tested["total_completions"] == 2
    test_dir = settings.tests_dir / result["test_id"]
    # The checkpoint had its own server, started with the run's adapter.
    record = WorkerRecord.model_validate_json((test_dir / f"local_server-{model_slug('run:r1@2')}.json").read_text())
    assert record.pid > 0
    log = (test_dir / f"local_server-{model_slug('run:r1@2')}.log").read_text()
    assert "Traceback" not in log
    assert json.dumps(result)  # the answer is plain JSON
