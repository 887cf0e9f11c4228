"""rl_evaluate_checkpoint's bad input: a clear error, and nothing written or started."""

from __future__ import annotations

from pathlib import Path

import pytest

from mcp_rl.errors import NotFound, UserError
from mcp_rl.evaluation import checkpoint_eval
from mcp_rl.proof.heldout import NoHeldOutItems
from mcp_rl.runconfig import EnvironmentRef, RunConfig
from mcp_rl.settings import Settings
from tests.conftest import make_env
from tests.fakes.fake_openrouter import FakeOpenRouter
from tests.kit.runs import record_checkpoint, write_run_file


def _model(tmp_path: Path) -> Path:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    return model


def _with_checkpoint(settings: Settings, run_id: str, model: Path, step: int = 2) -> RunConfig:
    config = write_run_file(settings, run_id, base_model=str(model))
    adapter = config.paths.checkpoints_dir / f"s{step}" / "adapter"
    adapter.mkdir(parents=True)
    (adapter / "adapter_config.json").write_text("{}")
    record_checkpoint(config, step, "sampler", str(adapter), final=True)
    return config


def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _refused(settings: Settings, error: type, words: str, run_id: str, step=None, compare_with=None) -> None:
    before = _snapshot(settings.home)
    with pytest.raises(error, match=words):
        checkpoint_eval.start_evaluation(settings, run_id, step, compare_with)
    assert _snapshot(settings.home) == before
    assert not checkpoint_eval.evaluations_dir(settings).exists()


def test_unknown_run_step_and_no_checkpoint(settings: Settings, tmp_path: Path) -> None:
    model = _model(tmp_path)
    _with_checkpoint(settings, "r1", model)
    write_run_file(settings, "fresh", base_model=str(model))
    _refused(settings, NotFound, "Unknown run 'nope'", "nope")
    _refused(settings, NotFound, r"no saved checkpoint at step 5\. Saved steps: 2\.", "r1", 5)
    _refused(settings, UserError, "has no saved checkpoint yet", "fresh")
    _refused(settings, NotFound, "Saved steps: 2", "r1", None, ["run:r1@9"])
    _refused(settings, UserError, "is the checkpoint being evaluated", "r1", None, ["run:r1@2"])


def test_environment_without_held_out_items(settings: Settings, tmp_path: Path) -> None:
    config = _with_checkpoint(settings, "r1", _model(tmp_path))
    toy = config.model_copy(
        update={
            "environment": EnvironmentRef(
                name="toy", class_name="Toy", file_path=Path("/x/toy.py"), project_root=Path("/x")
            )
        }
    )
    toy.dump(config.paths.run_dir / "run.yaml")
    _refused(settings, NoHeldOutItems, r"'toy' \(Toy in /x/toy.py\) has no evaluate\(\) of its own", "r1")


def test_environment_with_its_own_evaluate_only_against_its_base(settings: Settings, tmp_path: Path) -> None:
    config = _with_checkpoint(settings, "r1", _model(tmp_path))
    source = tmp_path / "own.py"
    source.write_text("class Own(BaseEnv):\n    async def evaluate(self):\n        pass\n", encoding="utf-8")
    own = config.model_copy(
        update={"environment": EnvironmentRef(name="own", class_name="Own", file_path=source, project_root=tmp_path)}
    )
    own.dump(config.paths.run_dir / "run.yaml")
    _refused(settings, UserError, "only a local run's checkpoint against its base", "r1", None, ["run:r1@2"])


def test_openrouter_ids_need_the_key_and_must_exist(home: Path, tmp_path: Path) -> None:
    model = _model(tmp_path)
    no_key = Settings.from_env(make_env(home))
    _with_checkpoint(no_key, "r1", model)
    _refused(no_key, UserError, "need OPENROUTER_API_KEY", "r1", None, ["qwen/qwen3-8b"])
    with FakeOpenRouter(api_key="sk-test") as fake:
        settings = Settings.from_env(make_env(home, OPENROUTER_API_KEY="sk-test", OPENROUTER_BASE_URL=fake.base_url))
        _refused(settings, UserError, "no/such-model", "r1", None, ["no/such-model"])
        assert not fake.completions_for("no/such-model")  # checked with the free model list, nothing sampled
