"""Opt-in (`pytest -m selfhosted`): a run on a self-hosted Tinker-compatible server, SkyRL's Tinker
API (JAX backend on this CPU, serving the embedded SmolLM2-135M from its folder), submitted
through a real stdio MCP client with `backend=tinker` and `tinker_base_url`. The trainer asks the
server which SDK it speaks (auto: SkyRL speaks 0.25) and runs with that SDK; sampling, training,
checkpoints and the held-out evaluations all happen on SkyRL. Prints seconds per step and how
closely the sampler's and the trainer's logprobs agree. Needs Python 3.12 and ~6.7 GB for SkyRL's
venv (scripts/install_skyrl, made on first use outside the checkout)."""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterator
from pathlib import Path

import pytest
from mcp import Client

from tests.conftest import stdio_params
from tests.kit.mcp import ok, run_to_end
from tests.selfhosted.skyrl_server import SkyrlServer

pytestmark = [pytest.mark.anyio, pytest.mark.selfhosted, pytest.mark.timeout(3600)]

RUN_DEADLINE_S = 2400.0
STEPS = 3


@pytest.fixture
def skyrl(model_dir: Path, tmp_path: Path) -> Iterator[SkyrlServer]:
    folder = tmp_path / "skyrl"
    folder.mkdir()
    with SkyrlServer(model_dir, folder) as server:
        yield server


async def test_a_three_step_run_on_skyrls_tinker_api(home: Path, model_dir: Path, skyrl: SkyrlServer) -> None:
    # A self-hosted server takes any key; the tokenizer is the served model's own folder.
    # The user names the server that may receive the Tinker key (plain http: loopback needs no word for it).
    env = {
        "TINKER_API_KEY": "tml-self-hosted-test",
        "MCP_RL_TOKENIZER_PATH": str(model_dir),
        "MCP_RL_TINKER_HOSTS": skyrl.base_url,
    }
    async with Client(stdio_params(home, **env)) as client:
        await ok(client, "rl_select_environment", {"name": "arithmetic"})
        edits = {
            "backend": "tinker",
            "tinker_base_url": skyrl.base_url,
            "base_model": str(model_dir),  # SkyRL names its model by the folder it was given
            "total_steps": STEPS,
            # 12 groups a step: about 1 group in 8 had a reward difference in the runs measured (5 of
            # 42; one run of 3 steps of 4 groups had none and trained nothing), so 36 groups leave
            # about a 1 % chance of a run with nothing to train.
            "batch_size": 48,
            "group_size": 4,
            "lora_rank": 8,
        }
        for field, value in edits.items():
            await ok(client, "rl_edit_config", {"field": field, "value": value})
        started = await ok(client, "rl_start_training")
        run_id = started["run_id"]
        done = await run_to_end(client, run_id, RUN_DEADLINE_S)
        assert done["status"] == "completed", (done, skyrl.log.read_text()[-3000:])
        assert done["metrics"]["step"] == STEPS
        held_out = done["held_out"]
        assert held_out is not None and held_out["n"] > 0 and held_out["trained_score"] is not None, held_out
        trainer_log = (await client.read_resource(f"rl://runs/{run_id}/logs/trainer")).contents[0].text
    assert "tinker SDK (0, 25, 0)" in trainer_log, trainer_log[-2000:]  # auto: SkyRL speaks 0.25
    run_dir = Path(started["config_path"]).parent
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    steps = [m for m in lines if "time/step_seconds" in m]
    assert [m["step"] for m in steps] == list(range(1, STEPS + 1))
    # A step's wall time: waiting for its batch (sampling on SkyRL) and training on SkyRL.
    seconds = [m.get("time/wait_for_batch", 0.0) + m["time/step_seconds"] for m in steps]
    gaps = [m["logprobs/abs_diff"] for m in steps if m.get("batch/trained_sequences")]
    assert gaps, "no step trained anything: no logprob agreement to report"
    # The sampler and the trainer are the same server and weights: their logprobs of the same
    # tokens agree to SkyRL's bf16 rounding (the model config's dtype).
    assert max(gaps) < 0.5, gaps
    print(
        f"SkyRL {STEPS}-step run {run_id}: seconds per step {[round(s, 1) for s in seconds]} "
        f"(median {statistics.median(seconds):.1f}); mean |sampler - trainer logprob| of the steps that trained "
        f"{[round(g, 4) for g in gaps]}; held out: {held_out['sentence']}"
    )
