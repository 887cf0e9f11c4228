"""What `mcp-rl serve` does to start faster: a host waits for it before the first `tools/list`.

Between `begin()` and `done()` the server process imports the SDK and mcp_rl, builds the server
and registers its surface (on a worker thread while it already answers: server/rl_server.py).
Two costs there do not buy anything at that point:

* The cyclic garbage collector: importing and building makes ~100k long-lived objects and few
  cycles, so its passes over them were 90-170 ms of a start (measured) and freed ~8k objects.
  It is off until the server is built; `done()` freezes what exists then (never scanned again)
  and turns it back on for everything after.
* pydantic builds each model's validator when its class is made: ~100 classes, ~50 ms of a
  start, most of them used by no call of a given session. From `begin()` on, classes are made
  with pydantic's `defer_build` (each is built at its first use, under pydantic's own lock).
  pydantic has no public switch for its default, so the private one is set; if it moves in a
  pydantic release, classes are built at once as before (slower, the same behaviour).

Only the server process does this; tests that build a server in-process keep pydantic's
defaults, and the stdio end-to-end tests run the server as shipped.
"""

from __future__ import annotations

import gc


def begin() -> None:
    gc.disable()
    # pydantic's private module, only for this switch (see the module docstring)
    from pydantic._internal import _config

    defaults = getattr(_config, "config_defaults", None)
    if isinstance(defaults, dict) and "defer_build" in defaults:
        defaults["defer_build"] = True


def done() -> None:
    """The server is built: what exists now lives as long as it; collect only what comes after."""
    gc.freeze()
    gc.enable()
