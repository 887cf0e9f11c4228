"""One backend's life on Tinker, in a process of its own so that it imports the SDK put first on
its path (tests/trainer/test_tinker_dialects.py): set up, sample, train a step, save an interval
checkpoint and the final one, keep the interval one, finish; then resume from the saved state
and sample. Prints one line `RESULT {json}`.

    python tests/trainer/tinker_dialect_scenario.py BASE_URL API_KEY HOME
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import tinker

from mcp_rl.settings import Settings
from mcp_rl.trainer.backends.base import AdamParams, SamplingRequest, TrainingExample
from mcp_rl.trainer.backends.tinker import TinkerBackend, sdk_version
from tests.kit.runs import run_config


def main() -> None:
    base_url, api_key = sys.argv[1], sys.argv[2]

    def backend() -> TinkerBackend:
        service = tinker.ServiceClient(base_url=base_url, api_key=api_key)
        return TinkerBackend(service, base_model="Qwen/Qwen3-8B", lora_rank=8, checkpoint_ttl_s=3600)

    out: dict[str, object] = {"sdk": ".".join(map(str, sdk_version()))}
    # The first as a run's trainer makes it: from its run config and the environment's settings.
    settings = Settings.from_env({"TINKER_API_KEY": api_key, "TINKER_BASE_URL": base_url, "MCP_RL_HOME": sys.argv[3]})
    config = run_config(Path(sys.argv[3]) / "run", run_id="dialects", backend="tinker", base_model="Qwen/Qwen3-8B")
    first = TinkerBackend.from_settings(config, settings)
    first.checkpoint_ttl_s = None if first.self_hosted else 3600
    first.prepare()
    out["self_hosted"] = first.self_hosted
    out["sampled"] = [s.tokens for s in first.sample(SamplingRequest(prompt_tokens=[3, 4, 5], n=2, max_tokens=4))]
    example = TrainingExample(
        input_tokens=[3, 4, 5, 6],
        target_tokens=[4, 5, 6, 7],
        advantages=[0.0, 1.0, 1.0, 1.0],
        sampling_logprobs=[-1.0] * 4,
        trained=[False, True, True, True],
    )
    result, _ = first.train_step([example], AdamParams(learning_rate=1e-4, beta1=0.9, beta2=0.95, eps=1e-8), 1)
    out["loss"] = result.loss
    state, weights = first.save_checkpoint("step_1", final=False)
    out["final"] = list(first.save_checkpoint("final", final=True))
    first.keep_checkpoints([state, weights])
    first.close("success")
    resumed = backend()
    resumed.load_state(state)
    resumed.prepare()
    out["resumed_sampled"] = [s.tokens for s in resumed.sample(SamplingRequest(prompt_tokens=[3], n=1, max_tokens=2))]
    resumed.close("success")
    out["state"] = state
    print("RESULT " + json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
