"""Hub pushes that tell the truth (issue 33), through the REAL huggingface_hub in the real export
worker against a loopback Hub (HF_ENDPOINT) whose error body echoes the request's headers: the
token is in no answer, status file or log; a failed push leaves the complete export and says so,
with the repo it created; the same call again pushes that export without overwrite; no token is
refused before any export work."""

from __future__ import annotations

import base64
import json
import urllib.parse
from pathlib import Path

import pytest

from mcp_rl.errors import UserError
from mcp_rl.settings import Settings
from mcp_rl.weights import jobs
from mcp_rl.weights.destination import MARKER_FILE
from mcp_rl.weights.hub import scrub
from mcp_rl.weights.jobs import ExportState
from tests.conftest import make_env
from tests.fakes.hf_hub_server import HubServer
from tests.weights.test_export_destinations import _run, _wait

TOKEN = "hf_echoedTokenValue1234567890abcd"
REPO = "someone/my-model"


def _export(settings: Settings, dest: Path) -> jobs.ExportStatus:
    status = jobs.start(settings, "r1", step=1, format="adapter", dest=str(dest), push_to_hub=REPO, overwrite=False)
    status = _wait(settings, status.export_id, 120)
    status.message = jobs.describe(status, tinker=False)
    return status


def test_an_echoing_hub_never_gets_the_token_out_and_a_failed_push_keeps_the_export(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = Settings.from_env(make_env(home, HF_TOKEN=TOKEN))
    settings.ensure_home()
    _run(settings)
    dest = tmp_path / "out"
    with HubServer(TOKEN) as hub:
        # The worker inherits this process's environment (Settings.child_env): the loopback Hub.
        monkeypatch.setenv("HF_ENDPOINT", hub.base_url)
        # The pre-export check runs here, in this process, whose huggingface_hub read it at import.
        monkeypatch.setattr("huggingface_hub.constants.ENDPOINT", hub.base_url)
        monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", False)
        monkeypatch.setenv("HF_HOME", str(tmp_path / "hfhome"))
        monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
        for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):  # the loopback Hub is the only one reachable
            monkeypatch.delenv(name, raising=False)
        hub.wire.echo_on_commit = True
        failed = _export(settings, dest)
        assert failed.state == ExportState.FAILED, failed
        assert any("/commit/" in r["path"] for r in hub.wire.requests)  # the Hub echoed it
        hub.wire.echo_on_commit = False
        again = _export(settings, dest)
    answer = failed.model_dump_json()
    assert TOKEN not in answer and "***" in (failed.error or ""), failed.error
    assert f"complete in {dest}" in failed.message and "Nothing was left" not in failed.message
    assert f"{REPO} was created" in failed.message and "no overwrite needed" in failed.message
    assert (dest / MARKER_FILE).is_file() and (dest / "adapter_config.json").is_file()
    for file in home.rglob("*"):  # status.json, spec.json, export.log of both exports
        if file.is_file():
            assert TOKEN not in file.read_text(errors="ignore"), file
    assert again.state == ExportState.DONE, again
    assert again.result is not None and (again.result.hub_url or "").endswith(REPO)
    assert "adapter_config.json" in hub.wire.files[REPO] and hub.wire.repos[REPO]["private"] is True
    log = (jobs.exports_dir(settings) / again.export_id / jobs.LOG_FILE).read_text()
    assert "already there" in log


def test_no_token_is_refused_before_any_export_work(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HOME", str(tmp_path / "empty-hf-home"))
    monkeypatch.setattr("huggingface_hub.constants.HF_TOKEN_PATH", str(tmp_path / "none" / "token"))
    settings = Settings.from_env(make_env(home))
    settings.ensure_home()
    _run(settings)
    with pytest.raises(UserError, match="no Hugging Face token"):
        jobs.start(
            settings, "r1", step=1, format="adapter", dest=str(tmp_path / "o"), push_to_hub=REPO, overwrite=False
        )
    assert not (tmp_path / "o").exists() and not jobs.exports_dir(settings).exists()


@pytest.mark.parametrize(
    ("what", "refusal"),
    [
        ("a token the Hub refuses", "refused the Hugging Face token"),
        ("a read-only token", "read-only"),
        ("another user's namespace", "cannot create repos under 'someone'"),
    ],
)
def test_a_token_that_cannot_push_there_is_refused_before_any_export_work(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, what: str, refusal: str
) -> None:
    settings = Settings.from_env(make_env(home, HF_TOKEN=TOKEN))
    settings.ensure_home()
    _run(settings)
    with HubServer("hf_anotherValidTokenabcdef123456" if what == "a token the Hub refuses" else TOKEN) as hub:
        monkeypatch.setattr("huggingface_hub.constants.ENDPOINT", hub.base_url)
        monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", False)
        hub.wire.role = "read" if what == "a read-only token" else "write"
        hub.wire.user, hub.wire.orgs = (
            ("someone-else", ["an-org"]) if what == "another user's namespace" else ("someone", [])
        )
        with pytest.raises(UserError, match=refusal) as refused:
            jobs.start(
                settings, "r1", step=1, format="adapter", dest=str(tmp_path / "o"), push_to_hub=REPO, overwrite=False
            )
        assert [r["path"] for r in hub.wire.requests] == ["/api/whoami-v2"]  # nothing created, nothing pushed
    assert TOKEN not in str(refused.value)
    assert not (tmp_path / "o").exists() and not jobs.exports_dir(settings).exists()


def test_an_unreachable_hub_is_refused_within_its_deadline_naming_the_way_on(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import socket

    settings = Settings.from_env(make_env(home, HF_TOKEN=TOKEN))
    settings.ensure_home()
    _run(settings)
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    monkeypatch.setattr("huggingface_hub.constants.ENDPOINT", f"http://127.0.0.1:{port}")
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", False)
    with pytest.raises(UserError, match="export without push_to_hub now"):
        jobs.start(
            settings, "r1", step=1, format="adapter", dest=str(tmp_path / "o"), push_to_hub=REPO, overwrite=False
        )
    assert not (tmp_path / "o").exists() and not jobs.exports_dir(settings).exists()


def test_scrub_hides_the_token_in_headers_bodies_and_urls() -> None:
    text = json.dumps({"authorization": f"Bearer {TOKEN}", "url": f"https://hub/x?token={TOKEN}"})
    assert TOKEN not in scrub(text, TOKEN) and TOKEN not in scrub(text)
    assert scrub("Authorization: Bearer abc.def-1") == "Authorization: Bearer ***"


def test_scrub_hides_the_token_without_its_prefix_and_encoded() -> None:
    """A Hub error may echo the token as the Hub saw it: its random part alone, base64 in a basic
    auth header, or URL-encoded in a query."""
    token = "hf_Qw3rTy7UiOp9AsDfGhJkLzXcVbNm12"
    bare = token.removeprefix("hf_")
    echoes = [
        f"invalid credentials: {bare}",
        f"Authorization: Basic {base64.b64encode(f'user:{token}'.encode()).decode()}",
        f"token b64={base64.urlsafe_b64encode(token.encode()).decode().rstrip('=')}",
        f"https://hub/api?t={urllib.parse.quote(token + '/x', safe='')}",
    ]
    for echo in echoes:
        out = scrub(echo, token)
        assert bare not in out and bare[:12] not in out, out
        for word in out.replace("=", " ").split():  # nothing left decodes to the token either
            for decode in (base64.b64decode, base64.urlsafe_b64decode):
                try:
                    decoded = decode(word + "=" * (-len(word) % 4)).decode("utf-8", "replace")
                except ValueError:
                    continue
                assert bare[:12] not in decoded, (echo, out)
