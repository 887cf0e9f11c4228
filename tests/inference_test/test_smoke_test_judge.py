"""rl_test_inference on an MCP task whose reward is a paid judge (issue 47): the model's
environment process gets OpenRouter's key (it calls the judge; without it the smoke test failed
with "set OPENROUTER_API_KEY" though it was set) and one spend file shared by every model's
process (the task's judge.max_cost_usd holds over the whole test); the test's answer states the
judge's estimate beside the models' own. A task without a paid judge gets no key."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from mcp_rl.inference_test import service as smoke
from mcp_rl.inference_test.models import TestSpec
from mcp_rl.inference_test.runner import child_env, model_env_names
from mcp_rl.runconfig import EnvironmentRef
from mcp_rl.settings import Settings, bundled_environments_dir
from tests.conftest import make_env
from tests.fakes.fake_openrouter import FakeOpenRouter

JUDGE = "fake/judge"
POLICY = "fake/policy"
KEY = "sk-or-v1-" + "b" * 40
CAPITALS = (
    ("France", "Paris"),
    ("Japan", "Tokyo"),
    ("Peru", "Lima"),
    ("Kenya", "Nairobi"),
    ("Chile", "Santiago"),
    ("Egypt", "Cairo"),
    ("Norway", "Oslo"),
    ("Canada", "Ottawa"),
)
MCP_ENV = EnvironmentRef(
    name="mcp", class_name="McpEnv", file_path=bundled_environments_dir() / "mcp_env.py", project_root=Path(".")
)


def write_task(folder: Path, extra: str = "") -> Path:
    """A task file of eight scenarios on a server never started here (only its judge is read)."""
    (folder / "s.jsonl").write_text(
        "".join(json.dumps({"prompt": f"Capital of {c}?", "answer": a}) + "\n" for c, a in CAPITALS)
    )
    path = folder / "capitals.mcp.yaml"
    path.write_text(
        f"name: capitals\nserver:\n  command: {json.dumps(sys.executable)}\n  args: ['-c', 'pass']\n"
        f"scenarios: s.jsonl\nheld_out_fraction: 0.5\n{extra}"
    )
    return path


def test_a_judged_task_smoke_test_gets_the_judge_key_a_shared_spend_file_and_its_estimate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "paid").mkdir()
    (tmp_path / "checked").mkdir()
    paid = write_task(
        tmp_path / "paid", extra=f"reward: {{kind: judge}}\njudge: {{model: {JUDGE}, max_cost_usd: 0.02}}\n"
    )
    checked = write_task(tmp_path / "checked")
    monkeypatch.setattr(smoke, "start_worker", lambda *args, **kwargs: None)  # the spec is what is read here
    with FakeOpenRouter(behaviours={JUDGE: "ok", POLICY: "ok"}) as fake:
        env = make_env(tmp_path / "home", OPENROUTER_API_KEY=KEY, OPENROUTER_BASE_URL=fake.base_url)
        settings = Settings.from_env(env)
        monkeypatch.setenv("OPENROUTER_BASE_URL", fake.base_url)  # as in the test's worker process
        started = smoke.start_test(
            settings, MCP_ENV, {"task_file": str(paid)}, models=[POLICY], num_steps=2, group_size=2
        )
        plain = smoke.start_test(
            settings, MCP_ENV, {"task_file": str(checked)}, models=[POLICY], num_steps=2, group_size=2
        )
        assert not fake.completions_for(JUDGE)  # an estimate makes no paid call

    said = started.test_config.cost_estimates["judge"]
    assert said.startswith("the judge: at most $") and "2 groups of 2" in said, said
    assert "held to judge.max_cost_usd $0.02" in said
    assert "judge" not in plain.test_config.cost_estimates

    test_dir = settings.tests_dir / started.test_id
    spec = TestSpec.load(test_dir / "test.json")
    names = model_env_names(spec)
    assert "OPENROUTER_API_KEY" in names
    process = child_env(settings, "gateway-token", names, MCP_RL_JUDGE_SPEND_FILE=str(test_dir / "judge_spend.json"))
    assert process["OPENROUTER_API_KEY"] == KEY and process["OPENROUTER_BASE_URL"] == fake.base_url
    assert process["MCP_RL_JUDGE_SPEND_FILE"] == str(test_dir / "judge_spend.json")
    assert process["OPENAI_API_KEY"] == "gateway-token"  # the policy goes through the test's gateway

    plain_spec = TestSpec.load(settings.tests_dir / plain.test_id / "test.json")
    assert "OPENROUTER_API_KEY" not in child_env(settings, "gateway-token", model_env_names(plain_spec))
