"""Which weights `run:<id>[@<step>]` names, and the clear errors of bad references (nothing changed)."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest

from mcp_rl.errors import NotFound, UserError
from mcp_rl.run_checkpoints import parse_run_ref, resolve_checkpoint, resolve_ref
from mcp_rl.settings import Settings
from tests.kit.runs import record_checkpoint, write_run_file


def _fake_adapter(folder: Path) -> None:
    folder.mkdir(parents=True)
    (folder / "adapter_config.json").write_text("{}")


def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_newest_and_given_step(settings: Settings) -> None:
    config = write_run_file(settings, "r1", base_model="/m")
    for step in (2, 4):
        folder = config.paths.checkpoints_dir / f"step_{step:06d}"
        _fake_adapter(folder / "adapter")
        record_checkpoint(config, step, "state", str(folder), final=step == 4)
        record_checkpoint(config, step, "sampler", str(folder / "adapter"), final=step == 4)
    newest = resolve_ref(settings, "run:r1")
    assert (newest.step, newest.final, newest.saved_steps) == (4, True, [2, 4])
    assert newest.weights.endswith("step_000004/adapter") and newest.model_id == "run:r1@4"
    assert resolve_ref(settings, "run:r1@2").weights.endswith("step_000002/adapter")


def test_pruned_checkpoint_is_not_offered(settings: Settings) -> None:
    config = write_run_file(settings, "r1", base_model="/m")
    record_checkpoint(config, 2, "sampler", str(config.paths.checkpoints_dir / "gone" / "adapter"))
    _fake_adapter(config.paths.checkpoints_dir / "step_4" / "adapter")
    record_checkpoint(config, 4, "sampler", str(config.paths.checkpoints_dir / "step_4" / "adapter"))
    with pytest.raises(NotFound, match=r"no saved checkpoint at step 2\. Saved steps: 4\."):
        resolve_checkpoint(settings, "r1", 2)


def test_tinker_sampler_path(settings: Settings) -> None:
    config = write_run_file(settings, "t1", base_model="Qwen/Qwen3-4B", backend="tinker")
    record_checkpoint(config, 3, "state", "tinker://sess/weights/step_3")
    record_checkpoint(config, 3, "sampler", "tinker://sess/sampler_weights/step_3", final=True)
    ref = resolve_checkpoint(settings, "t1")
    assert (ref.backend, ref.weights, ref.base_model) == (
        "tinker",
        "tinker://sess/sampler_weights/step_3",
        "Qwen/Qwen3-4B",
    )


def test_a_run_on_a_self_hosted_tinker_server_is_not_sampled_through_hosted_tinker(settings: Settings) -> None:
    from mcp_rl.evaluation.checkpoint_eval import plan

    config = write_run_file(
        settings, "t2", base_model="/models/SmolLM2", backend="tinker", tinker_base_url="http://127.0.0.1:8000"
    )
    record_checkpoint(config, 3, "sampler", "tinker://model_x/sampler_weights/step_3", final=True)
    before = _snapshot(settings.home)
    with pytest.raises(
        UserError, match=r"self-hosted Tinker-compatible server at http://127\.0\.0\.1:8000.*rl_check_status"
    ):
        plan(settings, "t2", None, None)
    # Smoke tests, compare_with and serve-model resolve `run:<id>` through the same door.
    with pytest.raises(UserError, match=r"evaluates, smoke-tests and serves Tinker checkpoints through hosted Tinker"):
        resolve_ref(settings, "run:t2@3")
    assert _snapshot(settings.home) == before


@pytest.mark.parametrize(
    ("ref", "error", "words"),
    [
        ("run:nope", NotFound, "Unknown run 'nope'"),
        ("run:../x", UserError, "not a run checkpoint reference"),
        ("run:r1@9", NotFound, "Saved steps: 2"),
        ("run:empty", UserError, "has no saved checkpoint yet"),
        ("run:r1@-1", UserError, "not a run checkpoint reference"),
    ],
)
def test_bad_references_say_what_exists_and_change_nothing(
    settings: Settings, ref: str, error: type, words: str
) -> None:
    config = write_run_file(settings, "r1", base_model="/m")
    _fake_adapter(config.paths.checkpoints_dir / "s2" / "adapter")
    record_checkpoint(config, 2, "sampler", str(config.paths.checkpoints_dir / "s2" / "adapter"))
    write_run_file(settings, "empty", base_model="/m")
    before = _snapshot(settings.home)
    with pytest.raises(error, match=words.replace("(", r"\(")):
        resolve_ref(settings, ref)
    assert _snapshot(settings.home) == before


def test_parse() -> None:
    assert parse_run_ref("run:abc") == ("abc", None)
    assert parse_run_ref(" run:a-b_c@12 ") == ("a-b_c", 12)


def test_serve_model_refuses_bad_input_and_starts_nothing(
    home: Path, settings: Settings, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from mcp_rl import cli

    monkeypatch.setenv("MCP_RL_HOME", str(home))
    config = write_run_file(settings, "r1", base_model="/m")
    _fake_adapter(config.paths.checkpoints_dir / "s2" / "adapter")
    record_checkpoint(config, 2, "sampler", str(config.paths.checkpoints_dir / "s2" / "adapter"))
    before = _snapshot(home)
    assert cli.main(["serve-model", "nope"]) == 2
    assert "Unknown run 'nope'" in capsys.readouterr().err
    assert cli.main(["serve-model", "r1", "--step", "3"]) == 2
    assert "Saved steps: 2." in capsys.readouterr().err
    assert cli.main(["serve-model", "--stop", "r1-2-ffff"]) == 2
    assert "Unknown served model" in capsys.readouterr().err
    with socket.socket() as busy:  # a port in use: said at once, before any model loads
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        began = time.monotonic()
        assert cli.main(["serve-model", "r1", "--port", str(port)]) == 2
        assert time.monotonic() - began < 5
    assert f"port {port} is not free" in capsys.readouterr().err
    assert _snapshot(home) == before
