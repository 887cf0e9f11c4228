"""A server of one named model refuses requests for another name (issue 34: `mcp-rl serve-model`
answered any `model` it was asked for)."""

from __future__ import annotations

from fastapi.testclient import TestClient

from mcp_rl.trainer.inference_server import InferenceService, build_app


class NamedSampler:
    """Only its name is read before a request would be sampled."""

    model_name = "run-abc@4"
    tokenizer = None
    max_requests = 1


def test_another_model_name_is_refused_with_the_served_one() -> None:
    app = build_app(InferenceService(NamedSampler(), only_model="run-abc@4"))  # type: ignore[arg-type]
    with TestClient(app) as client:
        answer = client.post(
            "/v1/chat/completions", json={"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}
        )
        assert answer.status_code == 404
        assert "model 'gpt-4o' is not served here; this server serves 'run-abc@4'" in answer.json()["detail"]
        answer = client.post("/v1/completions", json={"model": "other", "prompt": "hi"})
        assert answer.status_code == 404
