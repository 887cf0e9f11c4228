"""Pushing an exported folder to the Hugging Face Hub with the user's own token.

The token is Settings.hf_token (HF_TOKEN) or the user's `hf auth login`; it goes to HfApi as an
argument and from there only into the Authorization header, never argv, logs, files or
answers. HF_ENDPOINT (read by huggingface_hub) points it at another Hub. Private by default.
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


def push(settings: Settings, folder: Path, repo_id: str, private: bool = True) -> str:
    """Upload `folder` to model repo `repo_id` (created private if new); returns its URL."""
    check_repo_id(repo_id)
    secret = token(settings)
    # huggingface_hub: imported only for a push
    from huggingface_hub import HfApi

    api = HfApi(token=secret)
    url = api.create_repo(repo_id, private=private, exist_ok=True, repo_type="model")
    api.upload_folder(folder_path=str(folder), repo_id=repo_id, repo_type="model", commit_message="Upload from mcp-rl")
    return str(url)
