"""The session: what one agent has chosen so far (environment, edits, run options), and selecting
an environment.

The session lives in `session.json` in the state directory, so a restarted server continues
where the last one stopped. Every change is a read-modify-write under an exclusive file lock
with an atomic replace, so concurrent servers never corrupt it.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, ValidationError

from mcp_rl.atomic import write_text_atomic
from mcp_rl.config.options import clean_run_options
from mcp_rl.environments.discovery import EnvironmentInfo
from mcp_rl.errors import NotFound, clip, clip_message
from mcp_rl.locking import exclusive_lock
from mcp_rl.runconfig import EnvironmentRef
from mcp_rl.settings import Settings


class Session(BaseModel):
    """What one agent has chosen so far. Persisted as session.json."""

    environment: EnvironmentRef | None = None
    edits: dict[str, Any] = {}
    run_options: dict[str, Any] = {}
    selected_at: float | None = None
    # What reading session.json had to repair (never written back; shown in the answers).
    notes: list[str] = Field(default_factory=list, exclude=True)


def config_revision(session: Session) -> str:
    """A short digest of what a run would be built from: the environment, its edits, the run options."""
    content = {
        "environment": session.environment.model_dump(mode="json") if session.environment else None,
        "edits": session.edits,
        "run_options": session.run_options,
    }
    return hashlib.sha256(json.dumps(content, sort_keys=True, default=str).encode()).hexdigest()[:12]


class SessionStore:
    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._path = settings.session_file
        self._lock_path = settings.session_file.with_suffix(".lock")

    def _locked(self) -> AbstractContextManager[None]:
        return exclusive_lock(self._lock_path)

    def _keep_aside(self) -> Path:
        """Move the damaged session.json aside (never deleted) and say where it went."""
        aside = self._path.with_name(f"session.damaged-{time.strftime('%Y%m%dT%H%M%S')}-{time.time_ns() % 10**9}.json")
        self._path.replace(aside)
        return aside

    def _kept_aside_note(self) -> list[str]:
        """No session.json, but a damaged one was kept aside: the read that repaired it may have been
        another call's (a server's start-up), so every read until the next selection says so."""
        kept = sorted(self._path.parent.glob("session.damaged-*.json"), key=lambda p: p.name)
        if not kept:
            return []
        return [
            f"session.json was damaged and kept as {kept[-1]}; a fresh session started. "
            "Select an environment again with rl_select_environment."
        ]

    def _read_unlocked(self) -> Session:
        try:
            raw = self._path.read_bytes()
        except FileNotFoundError:
            return Session(notes=self._kept_aside_note())
        except OSError as exc:  # a directory, unreadable, ...
            aside = self._keep_aside()
            return Session(
                notes=[
                    f"session.json could not be read ({exc.strerror or exc}); it was moved to {aside}. "
                    "Select an environment again with rl_select_environment."
                ]
            )
        try:
            data = json.loads(raw.decode("utf-8"))
            if not isinstance(data, dict):
                raise ValueError(f"a JSON {type(data).__name__}, not an object")
        except ValueError as exc:
            # Never lose it silently: keep the damaged file beside the fresh session.
            aside = self._keep_aside()
            return Session(
                notes=[
                    f"session.json was damaged ({clip_message(str(exc), 200)}); it was moved to {aside} and a "
                    "fresh session started. Select an environment again with rl_select_environment."
                ]
            )
        return self._salvage(data)

    def _salvage(self, data: dict[str, Any]) -> Session:
        """Keep every part of a parsed session that is valid; each part dropped gets a note."""
        notes: list[str] = []
        session = Session()
        for key in ("environment", "edits", "selected_at"):
            if key not in data:
                continue
            try:
                session = Session.model_validate({**session.model_dump(), key: data[key]})
            except ValidationError:
                notes.append(f"{key} in session.json was not valid ({clip(data[key])}) and was ignored.")
        if session.environment is None and session.edits:
            session = session.model_copy(update={"edits": {}})
        run_options, option_notes = clean_run_options(self._settings, data.get("run_options", {}))
        unknown = sorted(set(data) - set(Session.model_fields))
        if unknown:
            notes.append(f"Unknown keys {', '.join(map(clip, unknown))} in session.json were ignored.")
        return session.model_copy(update={"run_options": run_options, "notes": notes + option_notes})

    def read(self) -> Session:
        with self._locked():
            return self._read_unlocked()

    def update(self, change: Callable[[Session], Session]) -> Session:
        """Apply `change` to the current session atomically; if it raises, nothing is written.

        A session that needed repairs is kept aside before the repaired one replaces it.
        """
        with self._locked():
            current = self._read_unlocked()
            new = change(current)
            if current.notes and self._path.is_file():
                aside = self._path.with_name(f"session.before-repair-{time.strftime('%Y%m%dT%H%M%S')}.json")
                aside.write_bytes(self._path.read_bytes())
            write_text_atomic(self._path, new.model_dump_json(indent=2))
            return new


# --- selecting ------------------------------------------------------------------------------
def select_environment(store: SessionStore, env: EnvironmentInfo) -> Session:
    """Select an environment: edits reset to its own defaults, run options are kept."""
    ref = EnvironmentRef(
        name=env.name, class_name=env.class_name, file_path=env.file_path, project_root=env.project_root
    )
    return store.update(lambda s: s.model_copy(update={"environment": ref, "edits": {}, "selected_at": time.time()}))


def unknown_environment(name: str, available: list[str]) -> NotFound:
    # A name far longer than any environment's matches none (and would make difflib slow).
    close = difflib.get_close_matches(name, available, n=1, cutoff=0.4) if len(name) <= 200 else []
    hint = f" Closest match: {close[0]!r}." if close else ""
    listing = ", ".join(available) if available else "(none found; check MCP_RL_ENV_PATHS)"
    return NotFound(f"Unknown environment {clip(name)}.{hint} Available: {listing}.")
