"""Pushing an export through the REAL HfApi to a loopback Hub (HF_ENDPOINT): private by default,
the token only ever in the Authorization header; no token is a clear error."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from mcp_rl.errors import UserError
from mcp_rl.settings import Settings
from tests.conftest import make_env

TOKEN = "hf_loopbackTokenValue1234567890"

PUSH = """
import json, sys
from pathlib import Path
from mcp_rl.settings import Settings
from mcp_rl.weights.hub import push
print(json.dumps({"url": push(Settings.from_env(), Path(sys.argv[1]), "someone/my-model")}))
"""


def test_push_goes_through_hfapi_with_the_token_only_in_the_header(tmp_path: Path, home: Path) -> None:
    from tests.fakes.hf_hub_server import HubServer

    folder = tmp_path / "export"
    folder.mkdir()
    (folder / "adapter_config.json").write_text('{"r": 2}')
    (folder / "README.md").write_text("# card")
    with HubServer(TOKEN) as hub:
        env = make_env(home, HF_TOKEN=TOKEN, HF_ENDPOINT=hub.base_url, HF_HUB_DISABLE_TELEMETRY="1")
        env["HF_HOME"] = str(tmp_path / "hfhome")
        for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):  # the loopback Hub is the only one reachable
            env.pop(name, None)
        # A child process: huggingface_hub reads HF_ENDPOINT once, at import.
        out = subprocess.run(
            [sys.executable, "-c", PUSH, str(folder)], env=env, capture_output=True, text=True, timeout=120
        )
        assert out.returncode == 0, out.stderr[-2000:]
        wire = hub.wire
    assert TOKEN not in out.stdout and TOKEN not in out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1])["url"].endswith("someone/my-model")
    assert wire.repos["someone/my-model"]["private"] is True
    assert wire.files["someone/my-model"] == {"adapter_config.json": b'{"r": 2}', "README.md": b"# card"}
    assert wire.unauthorized == 0 and wire.requests
    for request in wire.requests:
        assert request["headers"]["authorization"] == f"Bearer {TOKEN}"
        others = {k: v for k, v in request["headers"].items() if k != "authorization"}
        assert TOKEN not in json.dumps(others) and TOKEN not in request["path"] + request["query"]
        assert TOKEN.encode() not in request["body"]
    assert not any(TOKEN in json.dumps(fetch) for fetch in wire.registry_fetches)
    assert not any(TOKEN in p.read_text(errors="ignore") for p in tmp_path.rglob("*") if p.is_file())


def test_no_token_is_a_clear_error(home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from mcp_rl.weights.hub import push

    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "empty-hf-home"))
    monkeypatch.setattr("huggingface_hub.constants.HF_TOKEN_PATH", str(tmp_path / "none" / "token"))
    settings = Settings.from_env(make_env(home))
    with pytest.raises(UserError, match="no Hugging Face token"):
        push(settings, tmp_path, "someone/my-model")
    placeholder = Settings.from_env(make_env(home, HF_TOKEN="${HF_TOKEN}"))
    assert placeholder.hf_token is None
    with pytest.raises(UserError, match="placeholder"):
        push(placeholder, tmp_path, "someone/my-model")
    with pytest.raises(UserError, match="repo id"):
        push(placeholder, tmp_path, "../x")
