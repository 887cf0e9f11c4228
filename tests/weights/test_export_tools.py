"""rl_export_weights end to end on a local run's checkpoint (embedded model, a tiny adapter made
here): the tool starts the background worker, answers within the budget, the export is
collected with rl_get_export_result; bad input is refused before anything starts; the CLI
`mcp-rl export` does the same in the foreground."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from mcp import Client

from mcp_rl.rundir import RunPaths
from mcp_rl.server.app import build_server
from mcp_rl.settings import Settings
from mcp_rl.trainer.status import RunRecorder
from tests.conftest import make_env
from tests.kit.mcp import ok
from tests.kit.runs import arithmetic_run_config
from tests.weights.test_export_local import adapter  # noqa: F401  (the fixture)

pytestmark = pytest.mark.slow


def _local_run(settings: Settings, model: Path, adapter_dir: Path) -> None:
    config = arithmetic_run_config(settings.runs_dir / "loc1", model, run_id="loc1", num_steps=3)
    run_dir = settings.runs_dir / "loc1"
    (run_dir / "checkpoints" / "step_000003").mkdir(parents=True)
    (run_dir / "run.yaml").write_text(yaml.safe_dump(config.model_dump(mode="json")))
    folder = run_dir / "checkpoints" / "step_000003"
    shutil.copytree(adapter_dir, folder / "adapter")
    (folder / "trainer_state.pt").write_bytes(b"state")
    recorder = RunRecorder(RunPaths.for_run(run_dir), 3)
    recorder.checkpoint(3, "state", str(folder), final=True)
    recorder.checkpoint(3, "sampler", str(folder / "adapter"), final=True)


@pytest.mark.anyio
async def test_export_tools_and_cli(home: Path, default_model: Path, adapter: Path, tmp_path: Path) -> None:  # noqa: F811
    settings = Settings.from_env(make_env(home, MCP_RL_MODEL=str(default_model)))
    settings.ensure_home()
    _local_run(settings, default_model, adapter)
    async with Client(build_server(settings)) as client:
        listed = await ok(client, "rl_list_checkpoints", {"run_id": "loc1"})
        assert [(c["step"], c["kind"]) for c in listed["checkpoints"]] == [(3, "adapter"), (3, "state")]
        assert listed["disk_mb"] >= 0
        dest = tmp_path / "merged"
        started = await ok(client, "rl_export_weights", {"run_id": "loc1", "format": "merged", "dest": str(dest)})
        status = started
        for _ in range(20):
            if status["state"] != "running":
                break
            status = await ok(client, "rl_get_export_result", {"export_id": started["export_id"], "wait_s": 30})
        assert status["state"] == "done", status
        assert "AutoModelForCausalLM" in status["message"]
        assert {"model.safetensors", "config.json", "README.md"} <= set(status["result"]["files"])
        refused = await client.call_tool("rl_export_weights", {"run_id": "loc1", "dest": str(dest)})
        assert refused.is_error and "overwrite" in refused.content[0].text
        unknown = await client.call_tool("rl_export_weights", {"run_id": "loc1", "step": 7})
        assert unknown.is_error and "step 7" in unknown.content[0].text
    from transformers import AutoModelForCausalLM

    AutoModelForCausalLM.from_pretrained(str(dest))

    env = make_env(home, MCP_RL_MODEL=str(default_model))
    env["PATH"] = ""
    out = subprocess.run(
        [sys.executable, "-m", "mcp_rl", "export", "loc1", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads(out.stdout)["result"]
    assert Path(result["dest"]) == settings.runs_dir / "loc1" / "exports" / "step_000003-adapter"
    assert "adapter_model.safetensors" in result["files"]

    # The foreground wait has a deadline: past it the export goes on and the answer says so.
    late = subprocess.run(
        [sys.executable, "-m", "mcp_rl", "export", "loc1", "--format", "merged", "--dest", str(tmp_path / "late")]
        + ["--timeout", "0.05", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert late.returncode == 3, late.stderr[-2000:]
    running = json.loads(late.stdout)
    assert running["state"] == "running" and "Not done within --timeout 0.05 s" in running["message"]
    assert f"rl_get_export_result(export_id={running['export_id']!r})" in running["message"]

    from mcp_rl.background import wait_for_job
    from mcp_rl.weights import jobs

    final = await wait_for_job(
        lambda: jobs.read_status(settings, running["export_id"]), lambda s: s.state == "running", 240.0
    )
    assert final.state == "done", final
    refused = subprocess.run(
        [sys.executable, "-m", "mcp_rl", "export", "loc1", "--timeout", "0"], env=env, capture_output=True, text=True
    )
    assert refused.returncode == 2 and "not a number of seconds above 0" in refused.stderr
