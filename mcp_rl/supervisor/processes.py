"""Moved to `mcp_rl.processes` (it serves runs, smoke tests, the demo and the doctor alike).

This name is kept only so code written against it keeps importing; import `mcp_rl.processes`.
"""

from mcp_rl.processes import (  # noqa: F401
    MARKER_ENV,
    Ended,
    Liveness,
    ProcessIdentity,
    Proof,
    exit_description,
    identify,
    is_alive,
    marker_for,
    prove,
    spawn,
    stop,
    stop_group,
)
