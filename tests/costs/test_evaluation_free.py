"""A local checkpoint's evaluation is free and never asked about (no item counting, no prices
fetched), and every rate in the packaged pricing file says when and where it comes from."""

from __future__ import annotations

from pathlib import Path

import yaml

from mcp_rl.costs.consent import gate
from mcp_rl.evaluation import checkpoint_eval
from mcp_rl.settings import Settings, configs_dir
from tests.conftest import make_env
from tests.kit.runs import record_checkpoint, write_run_file


def test_a_local_evaluation_is_free_and_needs_no_yes(home: Path, tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    settings = Settings.from_env(make_env(home, MCP_RL_CONFIRM_ABOVE_USD="0"))
    config = write_run_file(settings, "loc", base_model=str(model))
    adapter = config.paths.checkpoints_dir / "s2" / "adapter"
    adapter.mkdir(parents=True)
    (adapter / "adapter_config.json").write_text("{}")
    record_checkpoint(config, 2, "sampler", str(adapter), final=True)
    planned = checkpoint_eval.plan_priced(settings, "loc")
    assert planned.estimate.free and planned.stats is None  # nothing counted, nothing priced
    assert planned.estimate.summary().startswith("$0")
    assert all(p.free for p in planned.spec.pricing)
    decision = gate(settings, planned.estimate, None, checkpoint_eval.what(planned), "x({cap})")
    assert not decision.needs_yes  # even with a $0 threshold
    result = checkpoint_eval.refused(planned, "not used")  # the answer shape carries the $0 cost
    assert result.cost is not None and result.cost.summary.startswith("Cost: $0")


def test_every_packaged_rate_has_a_date_and_a_source() -> None:
    data = yaml.safe_load((configs_dir() / "pricing.yaml").read_text())
    entries = list(data["tinker"]["models"].values()) + list(data["tinker"]["sizes"])
    assert entries
    for entry in entries:
        assert entry["date"] and len(entry["source"]) > 20, entry
        assert all(entry[k] > 0 for k in ("prefill", "cached_prefill", "sample", "train")), entry
