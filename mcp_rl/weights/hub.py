"""Pushing an exported folder to the Hugging Face Hub with the user's own token.

The token is Settings.hf_token (HF_TOKEN) or the user's `hf auth login`; it goes to HfApi as an
argument and from there only into the Authorization header, never argv, logs, files or
answers. A Hub's error text may echo the request (its headers, a URL): every such text is passed
through `scrub` before it reaches an answer, a status file or a log. HF_ENDPOINT (read by
huggingface_hub) points it at another Hub. Private by default.
"""

from __future__ import annotations

import re
from pathlib import Path

from mcp_rl import redact
from mcp_rl.errors import UserError
from mcp_rl.settings import Settings

REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,95}/[A-Za-z0-9][A-Za-z0-9_.-]{0,95}$")


def check_repo_id(repo_id: str) -> str:
    if not REPO_ID.match(repo_id) or ".." in repo_id:
        raise UserError(f"push_to_hub must be a Hub repo id such as 'your-name/my-model', got {repo_id[:120]!r}")
    return repo_id


def token(settings: Settings) -> str:
    if settings.hf_token is not None:
        return settings.hf_token.get_secret_value()
    if "HF_TOKEN" in settings.placeholder_env_vars:
        raise UserError("HF_TOKEN holds a placeholder, not a token: set it to your Hugging Face token")
    # huggingface_hub: imported only for a push
    from huggingface_hub import get_token

    found = get_token()
    if not found:
        raise UserError(
            "no Hugging Face token: set HF_TOKEN in the server's environment, or run `hf auth login` "
            "on this machine, then export again"
        )
    return found


# An Authorization header or a token-looking value, wherever a service's error text shows one.
_BEARER = re.compile(r"(?i)(bearer\s+)[^\s'\",;}]+")
_HF_TOKEN = re.compile(r"\bhf_[A-Za-z0-9]{8,}")
HIDDEN = "***"


def scrub(text: str, *secrets: str | None) -> str:
    """`text` with every given secret, bearer credential and Hugging Face token replaced by ***,
    and (mcp_rl.redact) every key this process knows in its other forms: without its `hf_`
    prefix, base64, URL-encoded."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, HIDDEN)
            redact.learn("a Hub or service token", secret)  # e.g. the token of `hf auth login`
    text = redact.scrub(text)
    return _HF_TOKEN.sub(HIDDEN, _BEARER.sub(lambda m: m.group(1) + HIDDEN, text))


CHECK_TIMEOUT_S = 15.0


def check_access(settings: Settings, repo_id: str) -> str:
    """Before any export work: the token is one the Hub accepts, it may write, and `repo_id`'s
    namespace is its user's or one of their organisations'. Returns the token.

    Raises:
        UserError: bad repo id, no token, or the Hub refused it or did not answer (scrubbed).
    """
    check_repo_id(repo_id)
    secret = token(settings)
    # huggingface_hub: imported only for a push
    from huggingface_hub import constants
    from huggingface_hub.utils import build_hf_headers, get_session

    url = f"{constants.ENDPOINT}/api/whoami-v2"
    try:
        response = get_session().get(url, headers=build_hf_headers(token=secret), timeout=CHECK_TIMEOUT_S)
    except Exception as exc:  # unreachable, timed out: the export would fail at its end anyway
        raise UserError(
            scrub(f"the Hub at {constants.ENDPOINT} could not check the token: {type(exc).__name__}: {exc}", secret)[
                :400
            ]
            + "; export without push_to_hub now and push the export later, or try again"
        ) from None
    if response.status_code == 401:
        raise UserError(
            f"the Hub at {constants.ENDPOINT} refused the Hugging Face token (401): set HF_TOKEN to a valid token "
            "with write access (or run `hf auth login`), then export again"
        )
    if response.status_code != 200:
        raise UserError(
            scrub(
                f"the Hub at {constants.ENDPOINT} answered {response.status_code} checking the token: {response.text}",
                secret,
            )[:400]
        )
    who = response.json()
    return _may_write(who if isinstance(who, dict) else {}, repo_id, secret)


def _may_write(who: dict, repo_id: str, secret: str) -> str:
    role = ((who.get("auth") or {}).get("accessToken") or {}).get("role")
    if role == "read":
        raise UserError(
            "the Hugging Face token is read-only: create one with write access (huggingface.co/settings/tokens), "
            "set HF_TOKEN to it, then export again"
        )
    namespace = repo_id.split("/", 1)[0]
    names = [who.get("name")] + [org.get("name") for org in who.get("orgs") or [] if isinstance(org, dict)]
    mine = [name for name in names if isinstance(name, str)]
    if mine and namespace not in mine:
        raise UserError(
            f"push_to_hub {repo_id!r}: the token belongs to {mine[0]!r}, which cannot create repos under "
            f"{namespace!r}; use one of {', '.join(repr(n + '/...') for n in mine)}"
        )
    return secret


class PushFailed(Exception):
    """The upload failed; `created` is the URL of a repo this push created first (None: none)."""

    def __init__(self, message: str, created: str | None) -> None:
        super().__init__(message)
        self.created = created


def push(settings: Settings, folder: Path, repo_id: str, private: bool = True) -> str:
    """Upload `folder` to model repo `repo_id` (created private if new); returns its URL.

    Raises:
        UserError: bad repo id, no token.
        PushFailed: the Hub refused or failed; its text scrubbed of the token.
    """
    check_repo_id(repo_id)
    secret = token(settings)
    # huggingface_hub: imported only for a push
    from huggingface_hub import HfApi

    api = HfApi(token=secret)
    created = None
    try:
        existed = api.repo_exists(repo_id, repo_type="model")
        url = str(api.create_repo(repo_id, private=private, exist_ok=True, repo_type="model"))
        created = None if existed else url
        api.upload_folder(
            folder_path=str(folder), repo_id=repo_id, repo_type="model", commit_message="Upload from mcp-rl"
        )
    except Exception as exc:
        raise PushFailed(scrub(f"{type(exc).__name__}: {exc}", secret)[:800], created) from None
    return url
