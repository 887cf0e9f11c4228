"""`mcp-rl serve --transport http`: the MCP server over streamable HTTP, token-guarded.

One endpoint (`/mcp` by default) serves both protocol eras, like stdio. Loopback binds get the
SDK's DNS-rebinding protection; other binds need `MCP_RL_TOKEN` (see `mcp_rl.http_auth`).
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping

from mcp_rl.http_auth import TOKEN_ENV, BearerTokenMiddleware, bind_policy, is_loopback
from mcp_rl.settings import Settings

log = logging.getLogger(__name__)


def build_http_app(host: str, token: str | None, settings: Settings | None = None, path: str = "/mcp"):
    """The ASGI app: the SDK's streamable HTTP app, behind the bearer check when a token is set."""
    from mcp_rl.server import build_server

    mcp = build_server(settings)
    # `host` tells the SDK whether to switch on DNS-rebinding protection (loopback binds only).
    app = mcp.streamable_http_app(streamable_http_path=path, host=host)
    return BearerTokenMiddleware(app, token) if token else app


def serve_http(host: str, port: int, path: str = "/mcp", env: Mapping[str, str] | None = None) -> None:
    """Run until interrupted.

    Raises:
        UserError: a non-loopback `host` without MCP_RL_TOKEN (checked before anything binds).
    """
    import uvicorn

    env = os.environ if env is None else env
    token = bind_policy(host, env.get(TOKEN_ENV))
    app = build_http_app(host, token, Settings.from_env(env), path)
    shown = f"[{host}]" if ":" in host else host
    guard = "bearer token required" if token else "no token (loopback only)"
    print(f"mcp-rl: MCP over streamable HTTP at http://{shown}:{port}{path} ({guard})", file=sys.stderr, flush=True)
    if not is_loopback(host):
        log.warning("serving on a non-loopback address %s; requests need the bearer token", host)
    # uvicorn's access log holds method, path and status only, never headers (so never the token).
    # h11, not httptools: h11 strips optional whitespace around header values (RFC 9110 §5.5), which
    # the 2026-07-28 Mcp-Name/Mcp-Method header checks rely on; httptools passes it through.
    uvicorn.run(app, host=host, port=port, log_level="info", lifespan="on", http="h11")
