"""An MCP task's paid judge in rl_evaluate_checkpoint: each model's evaluate() runs in its own
process, and all of them get the evaluation's one spend file (`MCP_RL_JUDGE_SPEND_FILE`), so the
task's `judge.max_cost_usd` holds for the whole evaluation, not once per model (issue 47). The
sampler and the served model are stood in for: what is tested is the environment the children get."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mcp_rl.proof.outcomes import ItemOutcome
from mcp_rl.rundir import JUDGE_SPEND_FILE
from mcp_rl.settings import Settings
from tests.conftest import make_env
from tests.evaluation.test_checkpoint_verdict import worker


class _Stub:
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.max_requests = 1

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def close(self) -> None: ...


def test_every_models_evaluate_shares_the_evaluations_judge_spend_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import mcp_rl.evaluation.worker as worker_module
    import mcp_rl.ports
    import mcp_rl.proof.env_eval
    import mcp_rl.trainer.batcher
    import mcp_rl.trainer.inference_server

    seen: list[dict[str, str]] = []

    def evaluate(**kwargs: Any) -> Any:
        seen.append(dict(kwargs["child_env"]))
        return type("Result", (), {"outcomes": [ItemOutcome(item="a", score=1.0, completion="x")]})()

    monkeypatch.setattr(mcp_rl.proof.env_eval, "run_environment_evaluate", evaluate)
    monkeypatch.setattr(mcp_rl.ports, "allocate_ports", lambda n: [1])
    monkeypatch.setattr(mcp_rl.trainer.batcher, "batching_sampler", lambda sampler, settings: _Stub())
    monkeypatch.setattr(mcp_rl.trainer.inference_server, "ServerThread", _Stub)
    monkeypatch.setattr(mcp_rl.trainer.inference_server, "InferenceService", _Stub)
    monkeypatch.setattr(mcp_rl.trainer.inference_server, "build_app", lambda *a, **k: None)
    monkeypatch.setattr(worker_module, "declared_env_vars", lambda *a: [])
    monkeypatch.setenv("MCP_RL_JUDGE_SPEND_FILE", "/elsewhere/judge_spend.json")  # the server's own: not passed on

    folder = tmp_path / "eval"
    folder.mkdir()
    w = worker(folder, 4)
    w.settings = Settings.from_env(make_env(tmp_path))
    monkeypatch.setattr(w, "_local_sampler", lambda model: None)
    for index, model in enumerate(w.spec.models):
        w._evaluate_own(index, model)

    assert [m.state for m in w.result.models] == ["done", "done"], w.result.models
    assert [env.get("MCP_RL_JUDGE_SPEND_FILE") for env in seen] == [str(folder / JUDGE_SPEND_FILE)] * 2
