"""Service URLs that cannot be turned (issue 43 item 2): one canonical form, hosted Tinker decided
by its canonical host, the Tinker key only to hosted Tinker or a server the user listed, no plain
http off this machine, no link-local, metadata or private host unless listed; the same for
`ray_address`."""

from __future__ import annotations

from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from mcp_rl import config
from mcp_rl.config import RunOptions
from mcp_rl.errors import UserError
from mcp_rl.runconfig import TrainerSettings
from mcp_rl.settings import Settings
from mcp_rl.supervisor import launch
from mcp_rl.urls import HostKind, canonical_url, checked_service_url, is_hosted_tinker, parse_allowed_hosts
from tests.conftest import make_env
from tests.kit.loopback import LoopbackServer
from tests.kit.runs import run_config

BASE_OPTIONS = {
    "base_model": "default",
    "total_steps": 1,
    "batch_size": 8,
    "lora_rank": 8,
    "learning_rate": 1e-4,
    "adam_beta1": 0.9,
    "adam_beta2": 0.95,
    "max_token_trainer_length": 512,
    "save_checkpoint_interval": 0,
    "wandb_project": "p",
}


@pytest.mark.parametrize(
    ("given", "canonical"),
    [
        (
            "HTTPS://TINKER.THINKINGMACHINES.DEV/services/tinker-prod/",
            "https://tinker.thinkingmachines.dev/services/tinker-prod",
        ),
        ("https://tinker.thinkingmachines.dev./x", "https://tinker.thinkingmachines.dev/x"),
        ("https://tinker.thinkingmachines.dev:443", "https://tinker.thinkingmachines.dev"),
        ("http://127.0.0.1:80/", "http://127.0.0.1"),
        ("http://2130706433:8000", "http://127.0.0.1:8000"),  # an IPv4 address in decimal
        ("http://0x7f.1:8000", "http://127.0.0.1:8000"),
        ("http://[0:0:0:0:0:0:0:1]:8000", "http://[::1]:8000"),
        ("https://bücher.example/api", "https://xn--bcher-kva.example/api"),  # IDNA
    ],
)
def test_urls_have_one_canonical_form(given: str, canonical: str) -> None:
    assert canonical_url(given, "x").text == canonical


@pytest.mark.parametrize(
    "url",
    [
        "https://TINKER.THINKINGMACHINES.DEV/services/tinker-prod",
        "https://tinker.thinkingmachines.dev./services/tinker-prod",
        "https://tinker.thinkingmachines.dev:443/services/tinker-prod",
        "HTTPS://Tinker.ThinkingMachines.Dev./",
    ],
)
def test_hosted_tinker_in_any_spelling_is_hosted_and_billed(url: str) -> None:
    assert is_hosted_tinker(url)
    trainer = TrainerSettings(
        backend="tinker", base_model="Qwen/Qwen3-8B", num_steps=1, batch_size=8, group_size=4, tinker_base_url=url
    )
    assert trainer.self_hosted_server is None  # priced as hosted Tinker, never "$0, self-hosted"
    # ... and accepted as a run option without any listing (it is hosted Tinker).
    options = RunOptions.model_validate({**BASE_OPTIONS, "tinker_base_url": url})
    assert options.tinker_base_url is not None and options.tinker_base_url.startswith(
        "https://tinker.thinkingmachines.dev"
    )


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("http://169.254.169.254/latest/meta-data/", "link-local"),
        ("http://2852039166/latest/meta-data/", "link-local"),  # 169.254.169.254 in decimal
        ("http://[::ffff:169.254.169.254]/", "link-local"),
        ("https://[fe80::1]/", "link-local"),
        ("http://metadata.google.internal/computeMetadata/v1/", "metadata"),
        ("https://10.0.0.5:8000", "private"),
        ("https://192.168.1.20", "private"),
        ("https://skyrl.internal", "private"),
        ("https://0.0.0.0:8000", "unspecified"),
        ("http://tinker.example.org", "plain http"),
        ("https://user:secret@tinker.example.org", "user name or password"),
        ("ftp://tinker.example.org", "https://"),
        ("https://tinker.example.org/?x=1", "query"),
    ],
)
def test_a_turned_url_is_refused_naming_the_argument_and_what_to_do(url: str, why: str) -> None:
    with pytest.raises(UserError) as info:
        checked_service_url(url, "tinker_base_url", setting="MCP_RL_TINKER_HOSTS")
    message = str(info.value)
    assert why in message and "tinker_base_url" in message, message
    assert "secret" not in message  # a password in the URL is never echoed


def test_a_listed_host_is_allowed_and_plain_http_only_when_listed_with_http() -> None:
    listed = parse_allowed_hosts(["10.0.0.5:8000", "http://192.168.1.20:8000"], "MCP_RL_TINKER_HOSTS")
    assert checked_service_url("https://10.0.0.5:8000/", "a", allowed=listed, setting="S").kind is HostKind.PRIVATE
    with pytest.raises(UserError, match="plain http"):
        checked_service_url("http://10.0.0.5:8000", "a", allowed=listed, setting="S")
    assert checked_service_url("http://192.168.1.20:8000", "a", allowed=listed, setting="S").port == 8000
    with pytest.raises(UserError, match="private"):  # another port of a listed host is not listed
        checked_service_url("https://10.0.0.5:9000", "a", allowed=listed, setting="S")
    assert checked_service_url("http://localhost:8265", "a", setting="S").kind is HostKind.LOOPBACK


def _settings(home: Path, **extra: str) -> Settings:
    return Settings.from_env(make_env(home, **extra))


def test_tinker_base_url_needs_hosted_tinker_or_the_users_listing(home: Path) -> None:
    plain = _settings(home)
    for url in ("http://127.0.0.1:8000", "https://tinker.example.org", "http://169.254.169.254/latest/meta-data/"):
        with pytest.raises(ValueError, match="MCP_RL_TINKER_HOSTS"):
            config.resolve_run_options(plain, {"tinker_base_url": url})
    listed = _settings(home, MCP_RL_TINKER_HOSTS="127.0.0.1:8000, tinker.example.org")
    options, _ = config.resolve_run_options(listed, {"tinker_base_url": "HTTP://127.0.0.1:8000/"})
    assert options.tinker_base_url == "http://127.0.0.1:8000"  # stored canonical
    options, _ = config.resolve_run_options(listed, {"tinker_base_url": "https://Tinker.Example.Org./api"})
    assert options.tinker_base_url == "https://tinker.example.org/api"
    with pytest.raises(ValueError, match="plain http"):  # listed, but by name only: https
        config.resolve_run_options(listed, {"tinker_base_url": "http://tinker.example.org"})


def test_a_bad_allowed_hosts_entry_is_named_at_start(home: Path) -> None:
    with pytest.raises(UserError, match="MCP_RL_TINKER_HOSTS"):
        _settings(home, MCP_RL_TINKER_HOSTS="https://user:pw@host")
    with pytest.raises(UserError, match="MCP_RL_RAY_HOSTS"):
        _settings(home, MCP_RL_RAY_HOSTS="ftp://x")


def test_ray_address_follows_the_same_rules(home: Path) -> None:
    plain = _settings(home)
    options, _ = config.resolve_run_options(plain, {"ray_address": "HTTP://LOCALHOST:8265/"})
    assert options.ray_address == "http://localhost:8265"
    for url, why in (
        ("http://10.0.0.5:8265", "private"),
        ("http://169.254.169.254", "link-local"),
        ("http://ray.example.org:8265", "plain http"),
        ("http://127.0.0.1:8265/api", "path"),
        ("http://u:p@127.0.0.1:8265", "user name or password"),
    ):
        with pytest.raises(ValueError, match=why):
            config.resolve_run_options(plain, {"ray_address": url})
    listed = _settings(home, MCP_RL_RAY_HOSTS="http://10.0.0.5:8265")
    assert config.resolve_run_options(listed, {"ray_address": "http://10.0.0.5:8265"})[0].ray_address == (
        "http://10.0.0.5:8265"
    )


class _Counting(BaseHTTPRequestHandler):
    seen: list[dict[str, str]] = []

    def do_POST(self) -> None:
        self.seen.append(dict(self.headers))
        self.send_response(404)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def listener() -> Iterator[tuple[str, list[dict[str, str]]]]:
    _Counting.seen = []
    with LoopbackServer("counting", handler=_Counting) as server:
        yield server.base_url, _Counting.seen


def test_the_key_is_not_sent_where_the_user_did_not_say(
    home: Path, tmp_path: Path, listener: tuple[str, list[dict[str, str]]]
) -> None:
    """run.yaml written before the user's listing changed (or by hand): the supervisor checks again
    where the key leaves, and sends nothing."""
    url, seen = listener
    key = "tml-fake-key-for-the-url-test"
    config_ = run_config(tmp_path / "run", run_id="r1", backend="tinker", tinker_base_url=url, tinker_sdk="auto")
    with pytest.raises(UserError, match="MCP_RL_TINKER_HOSTS"):
        launch._tinker_env(config_, _settings(home, TINKER_API_KEY=key), {})
    assert seen == []
    env = launch._tinker_env(config_, _settings(home, TINKER_API_KEY=key, MCP_RL_TINKER_HOSTS=url), {})
    assert env["TINKER_BASE_URL"] == url and len(seen) == 1 and seen[0]["X-API-Key"] == key
