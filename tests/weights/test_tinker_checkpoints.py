"""A Tinker run's checkpoints and download through the REAL tinker SDK against the loopback
Tinker (tests/fakes/tinker_server.py): the list shows Tinker's expiry, keep/TTL/delete reach the
wire, the downloaded adapter equals what the server holds, an escaping file name is refused with
nothing written outside the destination."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mcp_rl.errors import UserError
from mcp_rl.rundir import RunPaths
from mcp_rl.settings import Settings
from mcp_rl.trainer.status import RunRecorder
from mcp_rl.weights import checkpoints
from mcp_rl.weights.export import ExportSpec
from mcp_rl.weights.tinker_download import download_checkpoint, safe_target
from mcp_rl.weights.worker import run as run_worker
from tests.conftest import make_env
from tests.fakes.tinker_server import API_KEY, TinkerServer, TinkerWire
from tests.kit.runs import arithmetic_run_config
from tests.kit.tinker_wire import MODEL, serve


def _setup(home: Path, server: TinkerServer, tokenizer: Path) -> tuple[Settings, list[str]]:
    """A Tinker run with checkpoints at steps 2 (expiring) and 4 (final), saved on the wire."""
    import tinker

    settings = Settings.from_env(make_env(home, TINKER_API_KEY=API_KEY, TINKER_BASE_URL=server.base_url))
    config = arithmetic_run_config(
        settings.runs_dir / "tk1", tokenizer, run_id="tk1", backend="tinker", base_model=MODEL
    )
    config.paths.run_dir.mkdir(parents=True)
    service = tinker.ServiceClient(base_url=server.base_url, api_key=API_KEY)
    training = service.create_lora_training_client(base_model=MODEL, rank=4).result()
    recorder = RunRecorder(RunPaths.for_run(config.paths.run_dir), 4)
    paths = []
    for step, ttl in ((2, 86400), (4, None)):
        state = training.save_state(f"step_{step:06d}", ttl_seconds=ttl).result().path
        sampler = training.save_weights_for_sampler(f"step_{step:06d}", ttl_seconds=ttl).result().path
        recorder.checkpoint(step, "state", state, final=ttl is None)
        recorder.checkpoint(step, "sampler", sampler, final=ttl is None)
        paths += [state, sampler]
    service.close("success").result()
    return settings, paths


@pytest.fixture
def tokenizer(tiny_tokenizer: str) -> Path:
    return Path(tiny_tokenizer)


def _write_run_yaml(settings: Settings, tokenizer: Path) -> None:
    import yaml

    config = arithmetic_run_config(
        settings.runs_dir / "tk1", tokenizer, run_id="tk1", backend="tinker", base_model=MODEL
    )
    (settings.runs_dir / "tk1" / "run.yaml").write_text(yaml.safe_dump(config.model_dump(mode="json")))


def test_list_keep_ttl_delete_reach_the_wire(home: Path, tokenizer: Path) -> None:
    with serve(str(tokenizer)) as server:
        settings, paths = _setup(home, server, tokenizer)
        _write_run_yaml(settings, tokenizer)
        listed = checkpoints.list_checkpoints(settings, "tk1")
        by_where = {c.where: c for c in listed.checkpoints}
        assert {c.kind for c in listed.checkpoints} == {"state", "sampler"}
        assert by_where[paths[0]].expires_in_hours == pytest.approx(24, abs=0.1)
        assert by_where[paths[2]].expires_at is None and by_where[paths[2]].final

        checkpoints.set_ttl(settings, "tk1", 2, 48)
        assert sorted(server.wire.ttl_calls) == sorted([(paths[0], 172800), (paths[1], 172800)])
        kept = checkpoints.keep(settings, "tk1", 2)
        assert sorted(server.wire.ttl_calls[2:]) == sorted([(paths[0], None), (paths[1], None)])
        assert all(c.kept and c.expires_at is None for c in kept.checkpoints if c.step == 2)

        with pytest.raises(UserError, match="final or kept"):
            checkpoints.delete(settings, "tk1", 2)
        with pytest.raises(UserError, match="no checkpoint at step 3"):
            checkpoints.keep(settings, "tk1", 3)
        with pytest.raises(UserError, match="between 1 and"):
            checkpoints.set_ttl(settings, "tk1", 2, 0.5)
        checkpoints.set_ttl(settings, "tk1", 2, 2)  # no longer kept: deletable
        left = checkpoints.delete(settings, "tk1", 2)
        assert sorted(server.wire.deleted) == sorted([paths[0], paths[1]])
        assert {c.step for c in left.checkpoints} == {4}


def test_download_equals_what_tinker_holds_and_the_export_is_cleaned_up(home: Path, tokenizer: Path) -> None:
    with serve(str(tokenizer)) as server:
        settings, paths = _setup(home, server, tokenizer)
        dest = home / "dl"
        dest.mkdir()
        phases: list[str] = []
        total = download_checkpoint(settings, paths[2], dest, phases.append)
        held = server.wire.export_files
        assert {p.name: p.read_bytes() for p in dest.iterdir()} == held
        assert total == sum(len(v) for v in held.values())
        export = server.wire.exports[-1]
        assert export["ttl_seconds"] == 3600 and server.wire.deleted == [export["path"]]
        assert [s["finished"] for s in server.wire.sessions.values()][-1] == "success"
        assert server.wire.loads[-1]["path"] == paths[2]  # create_training_client_from_state
        assert any("Tinker session" in p for p in phases)
        with pytest.raises(UserError, match="sampler weights cannot be downloaded"):
            download_checkpoint(settings, paths[3], dest, phases.append)


@pytest.mark.parametrize("name", ["../evil", "/etc/evil", "a/../../evil", "a\\..\\evil", "", "./x", "a//b"])
def test_an_escaping_name_is_refused(tmp_path: Path, name: str) -> None:
    root = tmp_path / "dest"
    root.mkdir()
    with pytest.raises(UserError, match="outside the destination"):
        safe_target(root, name)


def test_an_escaping_entry_on_the_wire_writes_nothing_anywhere(home: Path, tokenizer: Path) -> None:
    wire = TinkerWire(tokenizer_id=str(tokenizer))
    wire.export_files = {"adapter_config.json": b"{}", "../escaped.bin": b"evil"}
    with TinkerServer(wire) as server:
        settings, paths = _setup(home, server, tokenizer)
        dest = home / "box" / "dl"
        dest.mkdir(parents=True)
        with pytest.raises(UserError, match="outside the destination"):
            download_checkpoint(settings, paths[2], dest, lambda m: None)
        assert list(dest.iterdir()) == [] and not (home / "box" / "escaped.bin").exists()
        assert server.wire.downloads == []  # refused before any file was fetched
        assert server.wire.deleted  # the temporary export was still deleted


def test_the_worker_exports_a_tinker_checkpoint_as_an_adapter(home: Path, tokenizer: Path) -> None:
    with serve(str(tokenizer)) as server:
        settings, paths = _setup(home, server, tokenizer)
        job = home / "job"
        job.mkdir()
        dest = home / "out"
        spec = ExportSpec(
            run_id="tk1",
            run_dir=settings.runs_dir / "tk1",
            step=4,
            weights=paths[2],
            format="adapter",
            dest=dest,
            base_model=str(tokenizer),
            environment="arithmetic",
        )
        (job / "spec.json").write_text(spec.model_dump_json())
        from mcp_rl.weights.jobs import ExportState, ExportStatus, write_status

        write_status(job, ExportStatus(export_id="x", run_id="tk1", state=ExportState.RUNNING, started_at=0))
        assert run_worker(job, settings) == 0
    status = json.loads((job / "status.json").read_text())
    assert status["state"] == "done", status
    config = json.loads((dest / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == str(tokenizer)  # filled in, as push-hf does
    assert (dest / "adapter_model.safetensors").read_bytes() == b"fake-safetensors-bytes"
    assert not [p for p in home.iterdir() if p.name.startswith(".out")]  # scratch and partial removed


@pytest.mark.anyio
async def test_rl_export_weights_of_a_tinker_run_through_the_tools(home: Path, tokenizer: Path) -> None:
    from mcp import Client

    from mcp_rl.server.app import build_server
    from tests.kit.mcp import ok

    with serve(str(tokenizer)) as server:
        settings, paths = _setup(home, server, tokenizer)
        _write_run_yaml(settings, tokenizer)
        async with Client(build_server(settings)) as client:
            bad = await client.call_tool("rl_export_weights", {"run_id": "tk1", "format": "gguf"})
            assert bad.is_error and "format" in bad.content[0].text
            status = await ok(client, "rl_export_weights", {"run_id": "tk1", "format": "adapter"})
            for _ in range(10):
                if status["state"] != "running":
                    break
                assert "short Tinker session" in status["message"]
                status = await ok(client, "rl_get_export_result", {"export_id": status["export_id"], "wait_s": 20})
        assert status["state"] == "done", status
        dest = Path(status["result"]["dest"])
        assert dest == settings.runs_dir / "tk1" / "exports" / "step_000004-adapter"
        assert (dest / "adapter_model.safetensors").read_bytes() == server.wire.export_files[
            "adapter_model.safetensors"
        ]
        assert server.wire.loads[-1]["path"] == paths[2]
        # Its cost: no tokens; the temporary checkpoint's storage for the bytes fetched, at most an hour.
        size = sum(len(data) for data in server.wire.export_files.values())
        cost = status["cost"]
        assert cost["label"] == "estimated" and not cost["free"] and cost["tokens"] == 0
        assert cost["usd_at_most"] == pytest.approx(size / 1e9 * 0.10 / 720, rel=1e-3)
        assert "$0.10 per GB-month" in cost["summary"] and "not priced here, not $0" in cost["summary"]
        assert cost["summary"] in status["message"]


@pytest.mark.anyio
async def test_a_new_run_starts_from_a_kept_checkpoint_of_an_earlier_run(home: Path, tokenizer: Path) -> None:
    import tinker

    from mcp_rl.rundir import TrainerPhase
    from mcp_rl.trainer.backends.tinker import TinkerBackend
    from mcp_rl.trainer.loop import Trainer

    with serve(str(tokenizer)) as server:
        settings, paths = _setup(home, server, tokenizer)
        _write_run_yaml(settings, tokenizer)
        with pytest.raises(UserError, match="cannot start from it"):
            checkpoints.resolve_init(settings, "tk1", None, "other/model", 8)
        with pytest.raises(UserError, match="no resumable checkpoint at step 3"):
            checkpoints.resolve_init(settings, "tk1", 3, MODEL, 8)
        start = checkpoints.resolve_init(settings, "tk1", 2, MODEL, 8)
        assert start == paths[0]
        config = arithmetic_run_config(home / "run2", tokenizer, run_id="tk2")
        trainer_settings = config.trainer.model_copy(
            update={"backend": "tinker", "base_model": MODEL, "init_from": start}
        )
        config = config.model_copy(update={"trainer": trainer_settings})
        service = tinker.ServiceClient(base_url=server.base_url, api_key=API_KEY)
        trainer = Trainer(
            config, settings, lambda c, s: TinkerBackend(service, base_model=MODEL, lora_rank=8, tokenizer=None)
        )
        config.paths.run_dir.mkdir(parents=True)
        trainer.recorder.update(phase=TrainerPhase.STARTING)
        assert await trainer._load() == 0
        assert server.wire.loads[-1]["path"] == start and not server.wire.created[1:]
        trainer.backend.close("interrupted")


def test_the_start_from_run_option_binds_a_new_run_to_the_earlier_checkpoint(home: Path, tokenizer: Path) -> None:
    from mcp_rl.config import RunOptions, Session
    from mcp_rl.supervisor.start import _with_start_checkpoint

    with serve(str(tokenizer)) as server:
        settings, paths = _setup(home, server, tokenizer)
        _write_run_yaml(settings, tokenizer)
    config = arithmetic_run_config(home / "run2", tokenizer, run_id="tk2")
    config = config.model_copy(
        update={"trainer": config.trainer.model_copy(update={"backend": "tinker", "base_model": MODEL})}
    )
    lora_rank = config.trainer.lora_rank

    def bound(start_from: str | None) -> str | None:
        session = Session(run_options={"backend": "tinker", "lora_rank": lora_rank, "start_from": start_from})
        return _with_start_checkpoint(settings, session, config).trainer.init_from

    assert bound(None) is None
    assert bound("tk1@2") == paths[0]  # step 2's state checkpoint
    assert bound("tk1") == paths[2]  # the newest: step 4's
    with pytest.raises(UserError, match="no resumable checkpoint at step 3"):
        bound("tk1@3")
    with pytest.raises(Exception, match="tk9"):
        bound("tk9")
    # A malformed reference is refused by the option itself, before any run is looked at.
    with pytest.raises(ValueError, match="start_from"):
        RunOptions.model_validate(
            {
                "base_model": "x",
                "total_steps": 1,
                "batch_size": 1,
                "lora_rank": 1,
                "learning_rate": 0.1,
                "adam_beta1": 0.9,
                "adam_beta2": 0.9,
                "max_token_trainer_length": 16,
                "save_checkpoint_interval": 0,
                "wandb_project": "p",
                "start_from": "../etc@x",
            }
        )
