"""Tinker's billed usage beside the estimates, through the REAL tinker SDK (AdminClient.get_billing_usage)
against the loopback Tinker's billing endpoint: the run's sessions are found by the metadata the
trainer's ServiceClient is created with, the figures are what the wire received at Tinker's own
rates (not ours), another session's usage is not counted, a key without the billing role is a
note (never an error), and rl_get_results shows the billed figure beside the estimate."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from mcp_rl.costs.tinker_billing import billed_for_run
from mcp_rl.rundir import COST_STEP_USD_KEY, COST_TOTAL_USD_KEY, COST_TRAINED_TOKENS_KEY
from mcp_rl.settings import Settings
from mcp_rl.trainer.backends.base import AdamParams, SamplingRequest
from mcp_rl.trainer.backends.tinker import TinkerBackend
from tests.conftest import make_env
from tests.fakes.tinker_server import API_KEY, BILLED_USD_PER_MILLION, TinkerServer
from tests.kit.tinker_wire import example, make_backend, serve, tinker_run_config

pytestmark = pytest.mark.timeout(180)


def _settings(home: Path, server: TinkerServer) -> Settings:
    return Settings.from_env(make_env(home, TINKER_API_KEY=API_KEY, TINKER_BASE_URL=server.base_url))


def _use(backend: TinkerBackend) -> None:
    backend.prepare()
    backend.sample(SamplingRequest(prompt_tokens=[1, 2, 3, 4], n=2, max_tokens=5, temperature=1.0))
    backend.train_step([example([5, 6, 7, 8], 1.0, [-0.5] * 4)], AdamParams(learning_rate=1e-5), 1)


@pytest.mark.anyio
async def test_the_runs_billed_usage_is_what_tinker_reports_for_its_sessions(
    home: Path, tmp_path: Path, tiny_tokenizer: str
) -> None:
    with serve(tiny_tokenizer) as server:
        settings = _settings(home, server)
        config = tinker_run_config(tmp_path, tiny_tokenizer, run_id="billrun")
        ours = TinkerBackend.from_settings(config, settings)
        _use(ours)
        other = make_backend(server)  # another session (no run metadata): not this run's usage
        _use(other)
        wire = server.wire
        (session,) = [sid for sid, s in wire.sessions.items() if s["request"].get("user_metadata")]
        assert wire.sessions[session]["request"]["user_metadata"] == {"mcp_rl_run_id": "billrun"}
        prefill = sum(len(s["prompt"]) for s in wire.samples if s["session"] == session)
        sampled = sum(s["sampled_tokens"] for s in wire.samples if s["session"] == session)
        trained = sum(
            len(d["target_tokens"])
            for fb in [*wire.forward_backward, *wire.forwards]
            if fb["session"] == session
            for d in fb["datums"]
        )
        assert prefill and sampled and trained
        assert sum(len(s["prompt"]) for s in wire.samples) > prefill  # the other session used some too

        billed, note = billed_for_run(settings, "billrun", time.time() - 60, None)
        assert note is None and billed is not None
        assert (billed.prefill_tokens, billed.sampled_tokens, billed.training_tokens) == (prefill, sampled, trained)
        rates = BILLED_USD_PER_MILLION
        expected = (
            prefill * rates["sampling_prefill"] + sampled * rates["sampling_sample"] + trained * rates["training"]
        ) / 1e6
        assert billed.usd == pytest.approx(expected)
        assert billed.sessions == 1
        assert "Tinker's billing API: $" in billed.summary and "not an invoice" in billed.summary
        # The window the SDK sent is aligned to UTC hours, as the API requires.
        query = wire.billing_queries[-1]
        assert query["starting_on"].endswith(("00:00Z", "00:00+00:00")), query

        # rl_get_results: the estimate, with Tinker's billed figure beside it.
        from mcp_rl.supervisor.results import get_results

        config.dump(config.paths.run_dir / "run.yaml")
        rows = [{"step": 1, COST_TRAINED_TOKENS_KEY: trained, COST_STEP_USD_KEY: 1e-5, COST_TOTAL_USD_KEY: 1e-5}]
        config.paths.metrics.write_text("".join(json.dumps(r) + "\n" for r in rows))
        settings = Settings.from_env(
            make_env(home, TINKER_API_KEY=API_KEY, TINKER_BASE_URL=server.base_url, MCP_RL_HOME=str(tmp_path / "h"))
        )
        settings.runs_dir.mkdir(parents=True, exist_ok=True)
        (settings.runs_dir / "billrun").symlink_to(config.paths.run_dir)
        results = await get_results(settings, "billrun")
        assert results.cost is not None and results.cost.billed is not None
        assert results.cost.billed.usd == pytest.approx(expected)
        assert results.cost.summary.startswith("Estimated cost so far: $") and "Tinker's billing API: $" in (
            results.cost.summary
        )

        # A key without the billing role: a note in words, the estimate stands.
        wire.billing_role = False
        billed, note = billed_for_run(settings, "billrun", time.time() - 60, None)
        assert billed is None and note is not None and "billing-admin role" in note
        ours.close("success")
        other.close("success")
