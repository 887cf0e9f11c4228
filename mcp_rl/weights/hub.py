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
    """`text` with every given secret, bearer credential and Hugging Face token replaced by ***."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, HIDDEN)
    return _HF_TOKEN.sub(HIDDEN, _BEARER.sub(lambda m: m.group(1) + HIDDEN, text))


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
