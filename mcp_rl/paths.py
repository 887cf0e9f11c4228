"""The one lexical path normaliser: every place that compares a path given as text with a folder
of ours (an export's `dest` against the runs folder, a scaffold's `folder` against the searched
ones) takes it through `normal_path` first.

`os.path.normpath` collapses `..` and repeated slashes but keeps a leading `//` (POSIX leaves its
meaning to the system); on Linux `//home/x` is `/home/x`, so it is written that way here, or a
`//<home>/runs/...` would compare as outside the runs folder. Links are not followed (the callers
that must not follow them check for links themselves).
"""

from __future__ import annotations

import os
from pathlib import Path


def normal_path(path: str | Path) -> Path:
    """`path` with `~` expanded, `.`/`..` and repeated slashes collapsed, a leading `//` as `/`."""
    text = os.path.normpath(os.path.expanduser(str(path)))
    if text.startswith("//"):
        text = "/" + text.lstrip("/")
    return Path(text)
