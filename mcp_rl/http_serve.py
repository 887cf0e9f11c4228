"""`mcp-rl serve --transport http`: the MCP server over streamable HTTP, Host/Origin-checked and
token-guarded.

One endpoint (`/mcp` by default) serves both protocol eras, like stdio. Every bind checks Host
and Origin against an allow-list; non-loopback binds also need `MCP_RL_TOKEN` (see
`mcp_rl.http_auth`).
"""

from __future__ import annotations

import logging
import sys

import uvicorn
from mcp.server.transport_security import TransportSecuritySettings

from mcp_rl.http_auth import ASGIApp, BindPolicy, bind_policy, guarded, is_loopback
from mcp_rl.server import build_server
from mcp_rl.settings import Settings

log = logging.getLogger(__name__)


def policy_for(host: str, settings: Settings) -> BindPolicy:
    """The bind rule applied to `settings` (MCP_RL_TOKEN, MCP_RL_ALLOWED_HOSTS).

    Raises:
        UserError: the bind is not allowed as configured (checked before anything binds).
    """
    token = settings.http_token.get_secret_value() if settings.http_token is not None else None
    return bind_policy(host, token, settings.http_allowed_hosts)


def build_http_app(policy: BindPolicy, settings: Settings | None = None, path: str = "/mcp") -> ASGIApp:
    """The ASGI app: the SDK's streamable HTTP app behind our Host/Origin and bearer checks."""

    mcp = build_server(settings)
    # Our HostOriginMiddleware checks every bind however its address is spelled; the SDK's own
    # check (exact 127.0.0.1/localhost/::1 binds only, case-sensitive) would only duplicate it.
    # The SDK still checks Content-Type on POST.
    app = mcp.streamable_http_app(
        streamable_http_path=path,
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
    )
    return guarded(app, policy)


def serve_http(host: str, port: int, path: str = "/mcp", settings: Settings | None = None) -> None:
    """Run until interrupted.

    Raises:
        UserError: the bind is not allowed as configured (see `policy_for`).
    """
    settings = settings or Settings.from_env()
    policy = policy_for(host, settings)
    app = build_http_app(policy, settings, path)
    shown = f"[{host}]" if ":" in host else host
    print(
        f"mcp-rl: MCP over streamable HTTP at http://{shown}:{port}{path} ({policy.guard})", file=sys.stderr, flush=True
    )
    if not is_loopback(host):
        log.warning("serving on a non-loopback address %s; requests need the bearer token", host)
    # uvicorn's access log holds method, path and status only, never headers (so never the token).
    # h11, not httptools: h11 strips optional whitespace around header values (RFC 9110 §5.5), which
    # the 2026-07-28 Mcp-Name/Mcp-Method header checks rely on; httptools passes it through.
    uvicorn.run(app, host=host, port=port, log_level="info", lifespan="on", http="h11")
